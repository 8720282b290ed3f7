"""The model port: the chat model interface, its value types (Prompt, Reply, Usage), the providers, the system
prompts and the SDK deadlines. Below the context engine, the usage ledger and the turn, which all import it."""
