"""Which of a hub repository's files a conversion downloads."""

from embedgate.converters.hub.files import ignored, needed


def test_every_file_the_libraries_read_is_kept():
    files = [
        "config.json", "modules.json", "sentence_bert_config.json", "tokenizer.json", "vocab.txt", "README.md",
        "1_Pooling/config.json", "2_Dense/model.safetensors", "open_clip_config.json", "open_clip_pytorch_model.bin",
    ]
    assert needed(files) == sorted(files)


def test_formats_nothing_loads_and_hidden_files_are_left():
    kept = needed([
        ".gitattributes", "tf_model.h5", "flax_model.msgpack", "rust_model.ot", "onnx/model.onnx", "model.onnx",
        "openvino/openvino_model.xml", "coreml/model.mlmodel", "model.gguf", "optimizer.pt", "training_args.bin",
        ".cache/x", "config.json",
    ])
    assert kept == ["config.json"]
    assert ignored("onnx/model_qint8_avx512.onnx") and not ignored("tokenizer_config.json")


def test_pickled_weights_are_left_where_safetensors_lie_beside_them():
    files = [
        "model.safetensors", "pytorch_model.bin", "2_Dense/pytorch_model.bin",
        "open_clip_model.safetensors", "open_clip_pytorch_model.bin", "sub/weights.pth",
    ]
    # Beside safetensors in their folder: left. Alone in theirs: the only weights there are.
    assert needed(files) == ["2_Dense/pytorch_model.bin", "model.safetensors", "open_clip_model.safetensors",
                             "sub/weights.pth"]
