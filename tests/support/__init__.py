"""Helpers the test folders share: servers, browsers, clients, fixtures as plugins."""
