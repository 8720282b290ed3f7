"""The optional Redis hot tier (CHAT_REDIS_URL): live answers and recent chats shared by replicas."""
