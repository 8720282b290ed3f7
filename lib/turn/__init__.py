"""One turn: the model providers, the prompt and context given to them, and commit -> stream -> save."""
