"""The embedded DynamoDB of the local backend: moto's server in-process, its fixes, and its disk."""
