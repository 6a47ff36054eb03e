"""Write three sites' data and keys for the Flower example (scikit-learn's diabetes data).

Usage: ``python prepare_sites.py [DIRECTORY]`` (default ``sites``). Writes
``<site>.csv`` (ten features and ``target``), ``<site>.key`` (the site's key,
kept by the site) and ``server-keys.json`` (every site's key, kept by the
server). In a real deployment each site writes its own table and gets its key
over a secure channel; only the key file is shared with the server.
"""

import json
import secrets
import sys
from pathlib import Path

from sklearn.datasets import load_diabetes

SITES = {"north": slice(0, 150), "south": slice(150, 300), "east": slice(300, None)}


def main(directory="sites"):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    table = load_diabetes(as_frame=True).frame
    keys = {}
    for site, rows in SITES.items():
        table.iloc[rows].to_csv(directory / f"{site}.csv", index=False)
        keys[site] = secrets.token_hex(32)
        (directory / f"{site}.key").write_text(keys[site])
    (directory / "server-keys.json").write_text(json.dumps(keys, indent=2))
    for path in directory.iterdir():
        if path.suffix in (".key", ".json"):
            path.chmod(0o600)
    print(f"wrote {', '.join(SITES)} to {directory}/")


if __name__ == "__main__":
    main(*sys.argv[1:])
