"""Page helpers: the Streamlit glue, the chat page's state, identity, rendering and export of chats."""
