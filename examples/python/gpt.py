"""The character GPT of examples/gpt_char.toml trained on a text from Python, then sampled.

    .venv/bin/python examples/python/gpt.py [STEPS] [TEXT_FILE]

fit takes the text itself (bytes, or a str: its UTF-8 bytes): the config's [data] keys lay it out (nanoGPT's windows of
data.block_size characters) and its characters become the model's vocabulary.
"""
import glob
import os
import re
import sys

import xylem

here = os.path.dirname(os.path.abspath(__file__))
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 250
# The config's own corpus by default: Debian's fortunes, the files data.text reads, in its order.
files = sys.argv[2:] or sorted(f for f in glob.glob("/usr/share/games/fortunes/*") if not f.endswith((".dat", ".u8")))
text = b"".join(open(f, "rb").read() for f in files if os.path.isfile(f))  # bytes: the tokens are bytes
config = open(os.path.join(here, "..", "gpt_char.toml")).read()
# The whole run's steps (the config trains 2,000).
config = re.sub(r"(?m)^max_steps = \d+", f"max_steps = {steps}", config)
model = xylem.Model.from_config(config)
history = model.fit(text, verbose=1)
print("train loss per epoch (nats/char):", [round(v, 4) for v in history["loss"]])
print(model.generate(prime="The ", length=300, temperature=0.8, top_k=20, seed=1))
model.save("runs/gpt_py.safetensors")  # Model.load("runs/gpt_py.safetensors", config) generates again
