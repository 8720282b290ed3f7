"""The context engine (docs/context.md): what the model sees with a question, within a token budget."""
