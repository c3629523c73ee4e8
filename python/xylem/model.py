"""xylem.Model: a model built from a config by the C++ library, trained by its training loop."""
import numbers
import signal

from . import _arrays
from ._xylem import Model as _Model
from .callbacks import EarlyStopping, ModelCheckpoint


class History:
    """What fit returns: history[metric] is a list with one value per epoch (Keras's History);
    epochs holds each epoch's full logs."""

    def __init__(self, result):
        self.epochs = result["epochs"]
        self.history = {}
        for logs in self.epochs:
            for k, v in logs.items():
                if k != "epoch":
                    self.history.setdefault(k, []).append(v)
        self.finish_reason = result["finish_reason"]
        self.last_checkpoint = result["last_checkpoint"] or None
        self.best_checkpoint = result["best_checkpoint"] or None
        # (epoch, step) where a stop request (stop_training in a batch hook, a raise, Ctrl-C) ended
        # fit inside an epoch, whose metrics are then not in the history; None otherwise.
        self.stopped_at = (result["next_epoch"], result["next_step"]) if result["stopped_by_signal"] else None

    def __getitem__(self, metric):
        return self.history[metric]

    def __repr__(self):
        return f"History({len(self.epochs)} epochs: {sorted(self.history)})"


class Model:
    """A model, its loss and its solver, as the config describes them, on one backend's device.

    Build one with Model.from_config or Model.load. The model is built (its parameters allocated
    and initialised from the config's seed) for the sample shape of the first array it is given,
    or of input_shape= at from_config."""

    stop_training = False

    def __init__(self, native):
        self._m = native  # the C++ model (python/src/model.cpp)

    @staticmethod
    def from_config(config, backend="auto", plugin_path=(), input_shape=None):
        """A model from a TOML config: a file's path, or the TOML text itself.

        backend: "auto" (the config's own choice, after XYLEM_BACKEND), or a name that must then be
        available (RuntimeError saying why not). plugin_path: folders searched before
        XYLEM_PLUGIN_PATH and the package's own plugins. input_shape: one sample's shape, to build
        the model now (summary, state_dict before any data)."""
        name = "" if backend in (None, "auto") else backend
        return Model(_Model.from_config(str(config), name, [str(p) for p in plugin_path],
                                        None if input_shape is None else [int(d) for d in input_shape]))

    @staticmethod
    def from_onnx(path, backend="auto", plugin_path=()):
        """An ONNX model (opsets 13-17) through xylem's importer: its graph becomes the same model a
        config gives (docs/onnx.md), built and holding the file's weights; predict, evaluate, fit,
        save and state_dict work as for any model. An unsupported op or a malformed file: ValueError
        naming every such op."""
        name = "" if backend in (None, "auto") else backend
        return Model(_Model.from_onnx(str(path), name, [str(p) for p in plugin_path]))

    @staticmethod
    def load(checkpoint, config, backend="auto", plugin_path=(), input_shape=None):
        """The model of `config` with the parameters of a checkpoint (model.safetensors, or a run's
        last/best.safetensors), loaded when the model is built."""
        m = Model.from_config(config, backend, plugin_path)
        m._m._load_checkpoint(str(checkpoint))
        if input_shape is not None:
            m._build(input_shape)
        return m

    def _build(self, input_shape):
        import numpy as np
        dtype = np.int32 if self.takes_tokens else np.float32
        self._m._predict(np.zeros((1, *input_shape), dtype=dtype), 1)

    def fit(self, x, y=None, epochs=None, batch_size=None, validation_split=0.0, validation_data=None,
            callbacks=(), verbose=1, shuffle=True, resume=None):
        """Trains on NumPy arrays with the library's training loop (train::fit), as `xylem train`
        trains: the config's [train] and [solver] keys, its seed and shuffle. x: samples [N, ...]
        (float32, or int32 token ids for a text model); y: int32 labels [N] (tokens: [N, steps]).
        Or x bytes (or a str, as its UTF-8 bytes) and no y: a corpus for a character model, laid out by the config's [data] keys
        (seq_len streams, or block_size windows) as [data] text lays out its files; its characters
        become the model's vocabulary (saved with its checkpoints, for generate).
        epochs, batch_size: override the config's. validation_split: hold out this fraction of the
        samples, from the end; or validation_data=(x_val, y_val). callbacks: objects with
        on_train_batch_end / on_validation_end / on_epoch_end, plus ModelCheckpoint and
        EarlyStopping. verbose: 0 silent, 1 the live progress line and a line per epoch as
        `xylem train` prints them, 2 one line per epoch. Returns a History.

        resume: a run folder (its last.safetensors) or a training checkpoint written by
        ModelCheckpoint: the parameters, solver state, shuffle order and position are restored and
        training continues to `epochs` (a total, as `xylem train --resume` counts them) as if it had
        never stopped, given the same arrays and options.

        Ctrl-C ends fit after the current step (a ModelCheckpoint writes last.safetensors) and
        raises KeyboardInterrupt; a callback's exception ends it after the step and is raised."""
        if verbose not in (0, 1, 2):
            raise ValueError(f"verbose must be 0, 1 or 2, got {verbose!r}")
        if not 0.0 <= validation_split < 1.0:
            raise ValueError(f"validation_split must be in [0, 1), got {validation_split!r}")
        vx = vy = None
        if isinstance(x, (str, bytes)):  # a corpus for a character model
            if y is not None or validation_data is not None:
                raise ValueError("fit on a text takes no y or validation_data: the targets are each character's next, "
                                 "and validation_split holds out the text's end")
        else:
            if y is None:
                raise ValueError("fit needs y, the labels of x (or a str x: a text for a character model)")
            x = _arrays.samples(x, self.takes_tokens)
            y = _arrays.labels(y)
            if validation_data is not None:
                if validation_split:
                    raise ValueError("give validation_split or validation_data, not both")
                vx, vy = validation_data
                vx = _arrays.samples(vx, self.takes_tokens, "validation_data x")
                vy = _arrays.labels(vy, "validation_data y")
        hooks, checkpoint_dir, monitor, patience, min_delta = [], None, "", 0, 0.0
        for cb in callbacks:
            if isinstance(cb, ModelCheckpoint):
                checkpoint_dir = cb.dirpath
                monitor = _metric(cb.monitor) if cb.monitor else monitor
            elif isinstance(cb, EarlyStopping):
                patience, min_delta = cb.patience, cb.min_delta
                monitor = _metric(cb.monitor)
            else:
                if hasattr(cb, "set_model"):
                    cb.set_model(self)
                hooks.append(cb)
        if verbose == 2:
            hooks.append(_EpochLines())
        self.stop_training = False
        result = self._m._fit(self, x, y, vx, vy, float(validation_split), _count("epochs", epochs),
                              _count("batch_size", batch_size),
                           bool(shuffle), int(verbose), hooks, checkpoint_dir, monitor, int(patience), float(min_delta),
                           None if resume is None else str(resume))
        if result["stopped_by_signal"] in (signal.SIGINT, signal.SIGTERM):
            where = f"epoch {result['next_epoch']} step {result['next_step']}"
            saved = f"; checkpoint: {result['last_checkpoint']}" if result["last_checkpoint"] else " (no ModelCheckpoint: nothing written)"
            raise KeyboardInterrupt(f"fit stopped by {signal.Signals(result['stopped_by_signal']).name} at {where}{saved}")
        return History(result)

    def evaluate(self, x, y, batch_size=None):
        """Mean loss (per sample; per token for a text model) and accuracy over x, y: a dict."""
        return self._m._evaluate(_arrays.samples(x, self.takes_tokens), _arrays.labels(y), _count("batch_size", batch_size))

    def predict(self, x, batch_size=None):
        """The model's outputs for every sample of x, a float32 ndarray [N, *output shape]: what its
        last layer gives (logits, or probabilities for a model ending in softmax).

        A model of several inputs (an ONNX graph's: input_names) takes a list or tuple of arrays,
        one per input in that order, each holding the same N samples; a model of several outputs
        (output_names) returns a list of arrays, one per output."""
        names = self._m.input_names
        if len(names) == 1 and len(self._m.output_names) == 1 and not isinstance(x, (list, tuple)):
            return self._m._predict(_arrays.samples(x, self.takes_tokens), _count("batch_size", batch_size))
        xs = list(x) if isinstance(x, (list, tuple)) else [x]
        if len(xs) != len(names):
            raise ValueError(f"predict: the model takes {len(names)} input(s) ({', '.join(names)}): pass "
                             f"{'a list of ' + str(len(names)) + ' arrays, one per input' if len(names) > 1 else 'one array'}, "
                             f"got {len(xs)}")
        arrays = [_arrays.samples(a, tokens, f"x[{k}] (input '{name}')")
                  for k, (a, tokens, name) in enumerate(zip(xs, self._m.input_tokens, names))]
        outs = self._m._predict_many(arrays, _count("batch_size", batch_size))
        return outs if len(outs) > 1 else outs[0]

    @property
    def input_names(self):
        """The model's inputs, in the order predict takes them: ["input"] unless the config (or the
        ONNX graph) names several."""
        return list(self._m.input_names)

    @property
    def output_names(self):
        """The layers whose outputs the model gives, in order (one unless the config or ONNX graph lists several)."""
        return list(self._m.output_names)

    def generate(self, prime="", length=500, temperature=1.0, top_k=0, seed=1):
        """Text from a character model (Model.load of a checkpoint trained on [data] text), drawn one
        character at a time as `xylem sample` draws it: the prime, then `length` characters from
        softmax(output / temperature) over the top_k most likely (0: all), with its own seeded generator."""
        return self._m.generate(str(prime), int(length), float(temperature), int(top_k), int(seed))

    def summary(self):
        """One line per layer: name, type, inputs, output shape, parameters (the training banner's table)."""
        return self._m.summary()

    def state_dict(self):
        """Every parameter and buffer as a float32 ndarray, under the names PyTorch's state_dict gives
        the same model ("1.weight", "1.bias", ...): copies, read from the device."""
        return self._m.state_dict()

    def load_state_dict(self, state_dict, strict=True):
        """Sets parameters from float32 arrays of the same names and shapes (converted from other
        float types); strict: every parameter must be given and no other name. Checked before any
        parameter changes."""
        import collections.abc
        import numpy as np
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"state_dict must be a mapping of names to arrays, got {type(state_dict).__name__}")
        for k in state_dict:
            if not isinstance(k, str):
                raise TypeError(f"state_dict names must be str, got {k!r}")
        # np.asarray keeps a 0-d value 0-d (ascontiguousarray made it [1]: a shape it does not have).
        return self._m.load_state_dict({k: np.asarray(v, dtype=np.float32, order="C") for k, v in state_dict.items()},
                                       strict)

    def save(self, path):
        """The parameters as safetensors (a PyTorch state_dict), written atomically."""
        self._m.save(str(path))

    built = property(lambda self: self._m.built, doc="whether the parameters exist (after the first array, or input_shape=)")
    backend = property(lambda self: self._m.backend, doc="the backend it runs on")
    device = property(lambda self: self._m.device, doc="the device it runs on")
    takes_tokens = property(lambda self: self._m.takes_tokens, doc="whether its input is int32 token ids")
    config_source = property(lambda self: self._m.config_source, doc="the config file (or <config text>)")

    def __repr__(self):
        return f"xylem.Model({self.config_source!r}, backend={self.backend!r}, device={self.device!r})"


def _count(name, value):
    """epochs or batch_size as the C++ side takes it: 0 for None (the config's), else a positive
    integer; 0, a negative number, a bool or a fraction is a ValueError (it used to mean the config's
    value, or be truncated, without a word)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer (or None: the config's), got {value!r}")
    return int(value)


def _metric(name):
    """Keras's metric names to the config's (train.best_metric)."""
    names = {"loss": "train_loss", "train_loss": "train_loss", "val_loss": "val_loss", "val_accuracy": "val_accuracy"}
    if name not in names:
        raise ValueError(f"monitor must be one of {sorted(names)}, got {name!r}")
    return names[name]


class _EpochLines:
    """verbose=2: one line per epoch."""

    def on_epoch_end(self, epoch, logs):
        line = f"epoch {epoch + 1}: loss {logs['loss']:.4f}"
        if "val_loss" in logs:
            line += f", val_loss {logs['val_loss']:.4f}, val_accuracy {logs['val_accuracy']:.4f}"
        print(line + f" ({logs['seconds']:.1f} s)", flush=True)
