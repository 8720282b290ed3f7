"""One embedded DynamoDB in its own process, for several `streamlit run` replicas (CHAT_BACKEND=aws pointed at it
with CHAT_DYNAMODB_ENDPOINT). Prints its endpoint URL, then serves until killed.

    python -m tests.shared_dynamo <data folder> <table>
"""

import sys
import time

from lib.config import Settings
from lib.database import local_client
from lib.embedded.server import LocalDynamo
from lib.storage.schema import create_table

if __name__ == "__main__":
    folder, table = sys.argv[1], sys.argv[2]
    server = LocalDynamo(folder, "us-east-1").start()
    dims = Settings.load(env={}, secrets={}, for_operator=True).embed_dimensions
    create_table(local_client(server), table, vector_dimensions=dims)
    print(server.endpoint_url, flush=True)
    while True:
        time.sleep(3600)
