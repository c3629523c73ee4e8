"""Callbacks for Model.fit.

A callback is any object with some of these methods, called between training steps with the
GIL held (the steps themselves run without it):
- on_train_batch_end(batch, logs): after every step; logs["loss"] is the mean loss of the last
  print_every steps (reading the loss every step would wait for the device every step);
- on_validation_end(epoch, logs): after the held-out set is scored (val_loss, val_accuracy);
- on_epoch_end(epoch, logs): after the epoch's checkpoints; logs as in History.
Setting model.stop_training = True in any hook ends fit: after the step (a batch hook) or the
epoch. An exception raised in a hook ends fit after the current step and is raised by fit.

ModelCheckpoint and EarlyStopping are not Python loops: fit hands them to the C++ callbacks
`xylem train` uses (train/run_callbacks.h), with the same files and rules.
"""


class Callback:
    """Base class with hooks that do nothing; override the ones you need (optional: any object works)."""

    model = None

    def set_model(self, model):
        self.model = model


class ModelCheckpoint:
    """Resumable checkpoints in a folder, as `xylem train` writes them: last.safetensors (every epoch,
    every checkpoint_every steps of the config, and when Ctrl-C stops fit), best.safetensors (by
    `monitor`), and model.safetensors (the final parameters) at the end."""

    def __init__(self, dirpath, monitor=None):
        self.dirpath = str(dirpath)
        self.monitor = monitor


class EarlyStopping:
    """Ends fit once `monitor` ("val_loss", "val_accuracy" or "loss") has not improved by more than
    min_delta for `patience` complete epochs: the config's [train] early_stopping rule."""

    def __init__(self, monitor="val_loss", patience=3, min_delta=0.0):
        if patience < 1:
            raise ValueError("EarlyStopping: patience must be at least 1")
        self.monitor = monitor
        self.patience = int(patience)
        self.min_delta = float(min_delta)
