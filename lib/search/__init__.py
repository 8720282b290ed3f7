"""Semantic search: embedders, vector items, hybrid search (lib/search)."""
