"""Usage and cost: the capacity meter, the usage ledger in the chat table, prices and the cost page's figures."""
