"""The web app through real sockets: the OpenAI-compatible API with the official SDK, the player's
stream route and transports, the voice library across processes, replicas behind nginx.
"""

from support.openai_helpers import oa_api, oa_clip, oa_sdk, oa_service, oa_url, oa_voice  # noqa: F401
