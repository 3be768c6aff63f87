"""One racer of tests/s3/test_s3_race_probe.py, a process of its own: opens an ObstoreBucket through the
gateway it is given, says it is ready (a file), waits for the start file, makes one conditional PUT
and prints what it got as one JSON line.

argv: endpoint url key mode(absent|match) etag|- ready_file start_file racer_id
"""

import json
import os
import sys
import time


def main() -> None:
    endpoint, url, key, mode, etag, ready, start, racer = sys.argv[1:9]
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    from objstore.storage.s3.client import open_bucket

    b = open_bucket(url)
    data = f"racer {racer} via {endpoint}".encode()
    with open(ready, "w"):
        pass
    while not os.path.exists(start):  # released together: the parent creates the file once every racer is ready
        time.sleep(0.0005)
    got = b.put_if_absent(key, data) if mode == "absent" else b.put_if_match(key, data, etag)
    print(json.dumps({"racer": racer, "endpoint": endpoint, "won": got is not None, "etag": got, "data": data.decode()}))


if __name__ == "__main__":
    main()
