"""Placeholder; the chat UI arrives with issue 3."""
