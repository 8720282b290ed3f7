"""Operations: what `python -m lib.admin` runs (invariant checks, demo history, ...)."""
