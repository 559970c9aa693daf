"""The web wing through real sockets: the OpenAI-compatible API with the official SDK, the player's
stream route and transports, the voice library across processes, replicas behind nginx.
"""
