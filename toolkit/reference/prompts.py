"""A fixed set of code prompts for the reference runtime's tests and `scripts/bench.py run reference`:
short Python snippets written for them (not copied from the training corpus), each cut where a
model must continue."""

PROMPTS: list[str] = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return ",
    "import os\nimport sys\n\n\ndef main(argv):\n    ",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        ",
    "def read_lines(path):\n    with open(path) as f:\n        ",
    "for i in range(10):\n    if i % 2 == 0:\n        ",
    "try:\n    value = int(text)\nexcept ValueError:\n    ",
    "def merge(left, right):\n    result = []\n    i = j = 0\n    while ",
    'if __name__ == "__main__":\n    ',
    "def __repr__(self):\n    return ",
    "    def __eq__(self, other):\n        if not isinstance(other, ",
    "def parse_args():\n    parser = argparse.ArgumentParser()\n    parser.add_argument(",
    "    @property\n    def name(self):\n        return self.",
    "def flatten(items):\n    out = []\n    for item in items:\n        if isinstance(item, list):\n            ",
    "    raise TypeError(",
    "def count_words(text):\n    counts = {}\n    for word in text.split():\n        ",
    "import re\n\nPATTERN = re.compile(",
    "    def close(self):\n        if self._file is not None:\n            ",
    "def is_prime(n):\n    if n < 2:\n        return False\n    for k in range(2, ",
    "        except OSError as exc:\n            ",
    "def test_addition(self):\n    self.assertEqual(",
    "    def __len__(self):\n        return len(self.",
    "def write_json(path, data):\n    with open(path, 'w') as f:\n        ",
    "    for key, value in sorted(mapping.items()):\n        ",
    'class Error(Exception):\n    """Base class for exceptions in this module."""\n\n    def __init__(self, ',
]
