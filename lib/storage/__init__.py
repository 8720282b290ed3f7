"""The chat table: key formats (keys), the values handed out (records), the store and its DynamoDB plumbing."""
