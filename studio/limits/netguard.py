"""Fetch a user-given http(s) URL without letting it reach the server's own network (SSRF guard).

For the first URL and every redirect: http(s) only, no credentials; the host is resolved once and
EVERY address must be public (`is_public_address`); the connection goes to the checked address
(no DNS rebinding) with the original Host and TLS name; no proxy, no compression, a size cap and
one deadline for everything. `allow_hosts` exempts exact "host" / "host:port" entries. The full
rules: docs/RELIABILITY.md ("Security", remote fetch).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass

import anyio

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL_CHARS = 2048
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SHARED_V4 = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: not private, not public either


class FetchError(Exception):
    """The URL cannot be fetched; `code` is a stable short id, the message is safe to show."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.message = message
        self.code = code


class FetchRefused(FetchError):
    """The URL is not allowed (scheme, credentials, or a non-public address)."""


class FetchTooLarge(FetchError):
    def __init__(self, size: int, limit: int):
        super().__init__(f"the download is larger than {limit} bytes", "too_large")
        self.size = size
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str  # lower-case name or IP literal, IPv6 without brackets
    port: int
    path: str  # path + query, at least "/"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def parse_url(url: str) -> Target:
    """Check the URL's form (not its address); raises FetchRefused."""
    if len(url) > MAX_URL_CHARS:
        raise FetchRefused(f"URL is longer than {MAX_URL_CHARS} characters", "bad_url")
    if any(ord(ch) < 0x21 or ch == "\\" for ch in url):
        raise FetchRefused("URL contains spaces, control characters or backslashes", "bad_url")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise FetchRefused("URL cannot be parsed", "bad_url") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise FetchRefused("only http and https URLs can be fetched", "bad_url")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise FetchRefused("URLs with user names or passwords are refused", "bad_url")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise FetchRefused("URL has no host", "bad_url")
    try:
        host.encode("ascii")
    except UnicodeEncodeError:
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise FetchRefused("URL host is not a valid name", "bad_url") from None
    port = port if port is not None else (443 if scheme == "https" else 80)
    if not 1 <= port <= 65535:
        raise FetchRefused("URL port is out of range", "bad_url")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(scheme, host.lower(), port, path)


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_public_address(ip: IPAddress) -> bool:
    """True only for globally routable unicast addresses (IPv4 inside IPv6, as ::ffff:, NAT64 or
    6to4, is judged as that IPv4 address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id or ip.teredo is not None:
            return False
        inner = _embedded_v4(ip)
        if inner is not None:
            return is_public_address(inner)
        if ip.is_site_local:
            return False
    if ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return False
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED_V4:
        return False
    return ip.is_global


def is_exempt(target: Target, allow_hosts: Collection[str]) -> bool:
    """Whether `target` matches an `allow_hosts` entry exactly ("host" or "host:port")."""
    if not allow_hosts:
        return False
    bracketed = f"[{target.host}]" if ":" in target.host else target.host
    names = {target.host, bracketed, f"{bracketed}:{target.port}"}
    return any(entry.lower() in names for entry in allow_hosts)


async def resolve(host: str, port: int) -> list[IPAddress]:
    """All addresses of `host` (an IP literal resolves to itself); FetchError when it has none."""
    lookup = functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        infos = await anyio.to_thread.run_sync(lookup, abandon_on_cancel=True)
    except (OSError, UnicodeError):
        raise FetchError("URL host cannot be resolved", "dns_failed") from None
    addresses: list[IPAddress] = []
    for info in infos:
        text = str(info[4][0]).split("%", 1)[0]
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            continue
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise FetchError("URL host cannot be resolved", "dns_failed")
    return addresses


async def checked_address(target: Target, allow_hosts: Collection[str] = ()) -> IPAddress:
    """The address to connect to: resolved once, every answer checked; raises FetchRefused."""
    addresses = await resolve(target.host, target.port)
    if not is_exempt(target, allow_hosts) and not all(is_public_address(ip) for ip in addresses):
        raise FetchRefused(
            "URL points to a loopback, private, link-local or otherwise non-public address; "
            "only public hosts can be fetched", "non_public_address")
    return addresses[0]


async def fetch(url: str, *, max_bytes: int, timeout_s: float, max_redirects: int = 3,
                allow_hosts: Collection[str] = ()) -> bytes:
    """GET `url` under the rules above; the body, at most `max_bytes`.

    Raises FetchRefused (not allowed), FetchTooLarge, or FetchError (network, HTTP status, timeout).
    """
    import httpx  # only needed when remote audio is allowed

    try:
        with anyio.fail_after(timeout_s):
            async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False, trust_env=False,
                                         headers={"User-Agent": "moss-tts-studio", "Accept-Encoding": "identity"},
                                         ) as client:
                for _hop in range(max_redirects + 1):
                    target = parse_url(url)
                    ip = await checked_address(target, allow_hosts)
                    pinned = f"[{ip}]" if ip.version == 6 else str(ip)
                    request = client.build_request(
                        "GET", f"{target.scheme}://{pinned}:{target.port}{target.path}",
                        headers={"Host": target.host_header},
                        extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
                    )
                    response = await client.send(request, stream=True)
                    try:
                        if response.is_redirect:
                            location = response.headers.get("location", "")
                            url = urllib.parse.urljoin(url, location)
                            continue
                        if response.status_code != 200:
                            raise FetchError(f"URL answered HTTP {response.status_code}", "http_status")
                        return await _read_capped(response, max_bytes)
                    finally:
                        await response.aclose()
                raise FetchError(f"URL redirects more than {max_redirects} times", "too_many_redirects")
    except TimeoutError:
        raise FetchError(f"download took longer than {timeout_s:g} s", "timeout") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"download failed ({type(exc).__name__})", "network") from None


async def _read_capped(response, max_bytes: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchTooLarge(int(declared), max_bytes)
    data = bytearray()
    async for piece in response.aiter_raw():
        data += piece
        if len(data) > max_bytes:
            raise FetchTooLarge(len(data), max_bytes)
    return bytes(data)
