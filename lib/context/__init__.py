"""The context engine (issue 12, seed 003): what the model sees with a question, within a token budget."""
