#!/usr/bin/env python3
"""Downloads the PyPI file of package NAME whose sha256 is SHA256 into DIR, using only the
standard library (stock Debian has python3 but not pip). The pinned hash picks the file out
of the package's simple index (PEP 503) and is checked again on the bytes received.

Usage: fetch_wheel.py NAME SHA256 DIR   (prints the path written)
"""
import hashlib
import os
import re
import sys
import urllib.request

INDEX = os.environ.get("EMPATHIC_PYPI_SIMPLE", "https://pypi.org/simple")


def main():
    name, sha, out_dir = sys.argv[1:4]
    index_url = f"{INDEX}/{name}/"
    page = urllib.request.urlopen(index_url, timeout=60).read().decode()
    links = re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page)
    url = next((u for u, h in links if h == sha), None)
    if url is None:
        sys.exit(f"fetch_wheel: no file of {name} with sha256 {sha} in {index_url}")
    url = urllib.parse.urljoin(index_url, url)
    path = os.path.join(out_dir, url.rsplit("/", 1)[-1])
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=120) as src, open(path + ".partial", "wb") as dst:
        while chunk := src.read(1 << 20):
            digest.update(chunk)
            dst.write(chunk)
    if digest.hexdigest() != sha:
        os.remove(path + ".partial")
        sys.exit(f"fetch_wheel: {url} has sha256 {digest.hexdigest()}, pinned {sha}")
    os.replace(path + ".partial", path)
    print(path)


if __name__ == "__main__":
    import urllib.parse  # noqa: F401 (urljoin above)
    main()
