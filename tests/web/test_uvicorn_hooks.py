"""`studio/connections.GuardedH11Protocol` subclasses uvicorn's internal `H11Protocol`: uvicorn is capped at
the minor this was tested on (requirements.txt), and this test names the hook or attribute that moved
when an upgrade changes them, before the reliability tests fail in a less telling way."""

from __future__ import annotations

import inspect

from uvicorn.protocols.http.h11_impl import H11Protocol

from studio.limits.connections import GuardedH11Protocol

# The methods GuardedH11Protocol overrides and calls through super(), with the parameters it passes.
HOOKS = {"connection_made": ["self", "transport"], "data_received": ["self", "data"], "eof_received": ["self"],
         "connection_lost": ["self", "exc"], "on_response_complete": ["self"]}
# Attributes of H11Protocol that the subclass reads (set in H11Protocol.__init__ or connection_made).
ATTRIBUTES = ("self.transport", "self.cycle", "self.conn", "self.loop", "self.connections")


def test_every_overridden_hook_still_exists_with_the_same_parameters():
    for name, params in HOOKS.items():
        assert name in vars(GuardedH11Protocol), f"GuardedH11Protocol no longer overrides {name}"
        hook = getattr(H11Protocol, name, None)
        assert hook is not None, f"uvicorn's H11Protocol has no {name} any more"
        assert list(inspect.signature(hook).parameters) == params, f"H11Protocol.{name} changed its parameters"


def test_the_constructor_and_the_attributes_the_guard_reads_are_still_there():
    params = list(inspect.signature(H11Protocol.__init__).parameters)
    assert params[:4] == ["self", "config", "server_state", "app_state"], params
    source = inspect.getsource(H11Protocol)
    missing = [name for name in ATTRIBUTES if f"{name} =" not in source and f"{name}: " not in source]
    assert missing == [], f"H11Protocol no longer sets {missing}"
    assert "response_complete" in inspect.getsource(inspect.getmodule(H11Protocol))  # the cycle's flag
