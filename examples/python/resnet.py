"""The small ResNet of examples/fashion_resnet.toml on part of Fashion-MNIST, with early stopping
and a callback that prints the loss every 50 steps.

    .venv/bin/python examples/python/resnet.py [SAMPLES] [EPOCHS]
"""
import os
import sys

import xylem
from fashion_data import load


class EveryFifty(xylem.Callback):
    def on_train_batch_end(self, batch, logs):
        if (batch + 1) % 50 == 0:
            print(f"  step {batch + 1}: recent loss {logs['loss']:.4f}", flush=True)


here = os.path.dirname(os.path.abspath(__file__))
samples = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
x_train, y_train, x_test, y_test = load()
model = xylem.Model.from_config(os.path.join(here, "..", "fashion_resnet.toml"))
history = model.fit(x_train[:samples], y_train[:samples], epochs=epochs, validation_split=0.1, verbose=2,
                    callbacks=[EveryFifty(), xylem.EarlyStopping(monitor="val_loss", patience=2)])
print(model.summary())
print("test:", model.evaluate(x_test[:2000], y_test[:2000]))
