"""The chat app's library: everything the Streamlit pages call."""
