"""The Fashion-MNIST MLP of examples/fashion_mlp.toml, trained from Python on NumPy arrays.

    .venv/bin/python examples/python/fashion_mlp.py [EPOCHS]
"""
import os
import sys

import numpy as np

import xylem
from fashion_data import load

here = os.path.dirname(os.path.abspath(__file__))
x_train, y_train, x_test, y_test = load()
model = xylem.Model.from_config(os.path.join(here, "..", "fashion_mlp.toml"))
print(model.summary() if model.built else f"{model}: built at the first fit")
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
history = model.fit(x_train, y_train, epochs=epochs, validation_split=0.1,
                    callbacks=[xylem.ModelCheckpoint("runs/fashion_mlp_py", monitor="val_accuracy")])
print("val_accuracy per epoch:", [round(a, 4) for a in history["val_accuracy"]])
print("test:", model.evaluate(x_test, y_test))
probabilities = model.predict(x_test[:5])
print("first five test images: predicted", probabilities.argmax(1), "labels", y_test[:5])
model.save("runs/fashion_mlp_py/final.safetensors")
