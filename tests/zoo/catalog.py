"""The zoo's models: which architectures the model-coverage suite exports, how each is built (random weights, small
configs, small inputs: CI has 2 cores and the whole suite must stay within minutes) and with which exporters.

A model id is "<name>-dynamo18" (torch.onnx.export(dynamo=True), opset 18), "<name>-legacy<N>" (the TorchScript
exporter, opset N in 13-17, spread over the range), "light_<name>" (a graph of the onnx package's old model zoo,
opset 9, whose ConstantOfShape weights are replaced by seeded random values) or "light_<name>-opset13" (the same
graph through onnx's version converter, as cinfer's refusal of opset 9 advises). expected_failures.txt names ids.
"""
import dataclasses
import pathlib

import numpy as np

LIGHT_DIR_IN_ONNX = pathlib.Path("backend/test/data/light")


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    source: str          # torchvision | transformers | onnx-light
    build: object        # () -> (torch module in eval mode, tuple of example inputs, input names, output names)
    legacy_opset: int    # opset of the legacy (TorchScript) export; the dynamo export is always opset 18
    detection: bool = False  # outputs boxes after NMS: compared with onnxruntime on the same file, boxes by overlap


def _randomize_norm_statistics(model, seed):
    """Random-weight torchvision models have BatchNorm at mean 0, var 1, scale 1, shift 0 (an identity): give every
    BatchNorm seeded statistics so the export's folded or unfolded normalisation is really exercised."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                if m.weight is not None:
                    m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                    m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
    return model


def _no_zero_weights(model, seed):
    """Some torchvision heads start at zero (ViT's classifier): a zero output would make any comparison pass, so
    every all-zero weight matrix gets seeded fan-in scaled values."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not torch.any(p):
                p.copy_(torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5)
    return model


def _image(size, channels=3, batch=1, seed=1):
    import torch
    return torch.randn(batch, channels, size, size, generator=torch.Generator().manual_seed(seed))


def _tv_classifier(factory, size=64, **kwargs):
    def build():
        import torch
        torch.manual_seed(0)
        model = _no_zero_weights(_randomize_norm_statistics(factory(**kwargs), 1), 1).eval()
        return model, (_image(size),), ["image"], ["logits"]
    return build


class _FirstOutput:
    """Wraps a module whose forward returns a dict or tuple, keeping one tensor (the exporters want tensors)."""

    def __new__(cls, module, key):
        import torch

        class FirstOutput(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = module

            def forward(self, *args):
                out = self.inner(*args)
                return out[key]
        return FirstOutput()


def _tv_segmentation(factory):
    def build():
        torch_model = _randomize_norm_statistics(factory(weights=None, weights_backbone=None, num_classes=5), 2)
        return _FirstOutput(torch_model, "out").eval(), (_image(64),), ["image"], ["out"]
    return build


def _tv_detection(factory, **kwargs):
    def build():
        import torch
        torch.manual_seed(0)
        detector = _randomize_norm_statistics(
            factory(weights=None, weights_backbone=None, num_classes=5, **kwargs), 3).eval()

        class Boxes(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.detector = detector

            def forward(self, image):
                found = self.detector([image])[0]
                return found["boxes"], found["scores"], found["labels"]
        return Boxes().eval(), (_image(128)[0] * 0.2 + 0.5,), ["image"], ["boxes", "scores", "labels"]
    return build


def _tv_video(conv_maker, stem):
    def build():
        import torch
        from torchvision.models.video import resnet as video
        torch.manual_seed(0)
        model = video.VideoResNet(video.BasicBlock, [getattr(video, conv_maker)] * 4, [1, 1, 1, 1],
                                  getattr(video, stem), num_classes=10)
        clip = torch.randn(1, 3, 4, 32, 32, generator=torch.Generator().manual_seed(4))
        return _randomize_norm_statistics(model, 4).eval(), (clip,), ["clip"], ["logits"]
    return build


def _tv_vit():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128,
                             num_classes=10)


def _tv_swin():
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                           stochastic_depth_prob=0.0, num_classes=10)


def _tv_convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    # layer_scale 1e-6 (the default) would make every residual branch invisible in the output
    return ConvNeXt([CNBlockConfig(32, 64, 2), CNBlockConfig(64, None, 2)], layer_scale=0.5, num_classes=10)


def _torchvision_specs():
    from torchvision import models
    from torchvision.models import detection, segmentation
    return [
        Spec("resnet18", "torchvision", _tv_classifier(models.resnet18), 13),
        Spec("mobilenet_v2", "torchvision", _tv_classifier(models.mobilenet_v2), 14),
        Spec("mobilenet_v3_small", "torchvision", _tv_classifier(models.mobilenet_v3_small), 15),
        Spec("efficientnet_b0", "torchvision", _tv_classifier(models.efficientnet_b0), 16),
        Spec("convnext_small_config", "torchvision", _tv_classifier(_tv_convnext), 17),
        Spec("regnet_y_400mf", "torchvision", _tv_classifier(models.regnet_y_400mf), 13),
        Spec("densenet121", "torchvision", _tv_classifier(models.densenet121), 14),
        Spec("squeezenet1_1", "torchvision", _tv_classifier(models.squeezenet1_1), 15),
        Spec("shufflenet_v2_x0_5", "torchvision", _tv_classifier(models.shufflenet_v2_x0_5), 16),
        Spec("googlenet", "torchvision", _tv_classifier(models.googlenet, aux_logits=False, init_weights=True), 17),
        Spec("inception_v3", "torchvision",
             _tv_classifier(models.inception_v3, size=80, aux_logits=False, init_weights=True), 13),
        Spec("vit_small_config", "torchvision", _tv_classifier(_tv_vit, size=32), 14),
        Spec("swin_small_config", "torchvision", _tv_classifier(_tv_swin, size=32), 15),
        Spec("deeplabv3_mobilenet_v3", "torchvision",
             _tv_segmentation(segmentation.deeplabv3_mobilenet_v3_large), 16),
        Spec("lraspp_mobilenet_v3", "torchvision", _tv_segmentation(segmentation.lraspp_mobilenet_v3_large), 17),
        Spec("ssdlite320_mobilenet_v3", "torchvision",
             _tv_detection(detection.ssdlite320_mobilenet_v3_large, detections_per_img=20), 17, detection=True),
        Spec("fasterrcnn_mobilenet_v3_320_fpn", "torchvision",
             _tv_detection(detection.fasterrcnn_mobilenet_v3_large_320_fpn, box_detections_per_img=20,
                           rpn_post_nms_top_n_test=50, rpn_pre_nms_top_n_test=100), 17, detection=True),
        Spec("r3d_small", "torchvision", _tv_video("Conv3DSimple", "BasicStem"), 16),
        Spec("r2plus1d_small", "torchvision", _tv_video("Conv2Plus1D", "R2Plus1dStem"), 17),
    ]


SEQ = 16          # tokens per sequence of the text models
PADDED = 3        # trailing padding positions in their attention mask


def _token_inputs(vocab, with_mask=True):
    import torch
    ids = torch.randint(3, vocab, (1, SEQ), generator=torch.Generator().manual_seed(5))
    if not with_mask:
        return (ids,), ["input_ids"]
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    mask[:, SEQ - PADDED:] = 0
    return (ids, mask), ["input_ids", "attention_mask"]


def _hf(model_class, config_class, config, inputs, output="last_hidden_state"):
    """A transformers model of a small config with random weights, its forward reduced to one output tensor."""
    def build():
        import torch
        import transformers
        torch.manual_seed(0)
        inner = getattr(transformers, model_class)(getattr(transformers, config_class)(**config)).eval()
        args, names = inputs()

        class OneOutput(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, *tensors):
                kwargs = dict(zip(names, tensors))
                return getattr(self.inner(**kwargs, return_dict=True), output)
        return OneOutput().eval(), args, names, [output]
    return build


def _text(vocab=128, with_mask=True):
    return lambda: _token_inputs(vocab, with_mask)


def _pixels(size, channels=3):
    return lambda: ((_image(size, channels),), ["pixel_values"])


def _audio_features(mel_bins, frames):
    def inputs():
        import torch
        return (torch.randn(1, mel_bins, frames, generator=torch.Generator().manual_seed(6)),), ["input_features"]
    return inputs


def _waveform(samples):
    def inputs():
        import torch
        return (torch.randn(1, samples, generator=torch.Generator().manual_seed(7)),), ["input_values"]
    return inputs


SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def _transformers_specs():
    return [
        Spec("distilbert", "transformers",
             _hf("DistilBertModel", "DistilBertConfig",
                 dict(vocab_size=128, dim=64, n_layers=2, n_heads=4, hidden_dim=128), _text()), 14),
        Spec("roberta", "transformers",
             _hf("RobertaModel", "RobertaConfig", dict(vocab_size=128, max_position_embeddings=64, **SMALL),
                 _text()), 15),
        Spec("albert", "transformers",
             _hf("AlbertModel", "AlbertConfig", dict(vocab_size=128, embedding_size=32, **SMALL), _text()), 16),
        Spec("electra", "transformers",
             _hf("ElectraModel", "ElectraConfig", dict(vocab_size=128, embedding_size=32, **SMALL), _text()), 17),
        Spec("deberta_v2", "transformers",
             _hf("DebertaV2Model", "DebertaV2Config", dict(vocab_size=128, **SMALL), _text()), 17),
        Spec("gpt2", "transformers",
             _hf("GPT2LMHeadModel", "GPT2Config",
                 dict(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=False),
                 _text(), output="logits"), 14),
        Spec("llama", "transformers",
             _hf("LlamaForCausalLM", "LlamaConfig",
                 dict(vocab_size=128, num_key_value_heads=2, max_position_embeddings=64, use_cache=False, **SMALL),
                 _text(), output="logits"), 15),
        Spec("t5_encoder", "transformers",
             _hf("T5EncoderModel", "T5Config",
                 dict(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4), _text()), 16),
        Spec("vit", "transformers",
             _hf("ViTModel", "ViTConfig", dict(image_size=32, patch_size=8, **SMALL), _pixels(32)), 17),
        Spec("clip_vision", "transformers",
             _hf("CLIPVisionModel", "CLIPVisionConfig", dict(image_size=32, patch_size=8, **SMALL), _pixels(32)), 14),
        Spec("whisper_encoder", "transformers",
             _hf("WhisperForAudioClassification", "WhisperConfig",
                 dict(num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                      decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128, max_source_positions=32,
                      num_labels=4), _audio_features(16, 64), output="logits"), 15),
        Spec("wav2vec2", "transformers",
             _hf("Wav2Vec2Model", "Wav2Vec2Config",
                 dict(conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                      num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, do_stable_layer_norm=True,
                      feat_extract_norm="layer", **SMALL), _waveform(1600)), 16),
    ]


# vgg19 and zfnet512 are left out: plain Conv/Relu/Pool/Gemm stacks like alexnet (LRN included), but 570 and 350 MB
# of random weights to write and read on every run from scratch
LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet")
LIGHT_OPSET = 13  # the converted copies' opset: the oldest cinfer reads


def light_model_path(name):
    import onnx
    return pathlib.Path(onnx.__file__).parent / LIGHT_DIR_IN_ONNX / f"light_{name}.onnx"


def randomize_light_model(model, seed):
    """The light graphs make each weight with ConstantOfShape (one repeated value: outputs mean little). Each becomes
    an initializer of seeded random values (and a final Softmax's input an output): fan-in scaled normals for weights (rank >= 2), values in [0.5, 1.5) for
    rank-1 tensors (biases, BatchNormalization scales and variances, which must stay positive)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    initializers = {t.name: t for t in model.graph.initializer}
    kept, shapes = [], set()
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in initializers:
            shape = tuple(int(d) for d in numpy_helper.to_array(initializers[node.input[0]]))
            if len(shape) >= 2:
                values = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
            else:
                values = rng.uniform(0.5, 1.5, shape)
            model.graph.initializer.append(numpy_helper.from_array(values.astype(np.float32), node.output[0]))
            # IR version 3 wants every initializer among the graph's inputs too (onnx's version converter checks)
            model.graph.input.append(helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, shape))
            shapes.add(node.input[0])
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    still_read = {name for node in kept for name in node.input}
    unused = [t for t in model.graph.initializer if t.name in shapes and t.name not in still_read]
    for t in unused:
        model.graph.initializer.remove(t)
    # a final Softmax of random logits is nearly one-hot (shufflenet's to 1e-30): its logits become an output too, so
    # the comparison sees more than the argmax
    last = model.graph.node[-1]
    if last.op_type == "Softmax" and last.input[0] not in {o.name for o in model.graph.output}:
        model.graph.output.append(helper.make_tensor_value_info(last.input[0], TensorProto.FLOAT, None))
    # opset-9 graphs list their initializers among the inputs too: the removed shapes go from there as well
    removed = {t.name for t in unused}
    declared = [v for v in model.graph.input if v.name not in removed]
    del model.graph.input[:]
    model.graph.input.extend(declared)
    return model


def all_specs():
    return _torchvision_specs() + _transformers_specs()


def model_ids():
    """Every id the suite runs, in the order it runs them."""
    ids = []
    for spec in all_specs():
        ids += [f"{spec.name}-dynamo18", f"{spec.name}-legacy{spec.legacy_opset}"]
    for name in LIGHT_MODELS:
        ids += [f"light_{name}", f"light_{name}-opset{LIGHT_OPSET}"]
    return ids
