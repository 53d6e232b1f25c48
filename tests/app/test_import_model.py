"""Model import: the SmolLM2 alias round-trips its tokenizer and chat template; bad sources are named."""

import json
import shutil

import pytest

from app.import_model import ModelImportError, import_model, main, resolve_gguf_alias

MESSAGES = [{"role": "user", "content": "What is 12 + 30? End with #### <answer>."}]


def test_alias_roundtrips_tokenizer_and_chat_template(smollm2_dir):
    from transformers import AutoTokenizer

    gguf = resolve_gguf_alias("smollm2-135m-instruct")
    original = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    imported = AutoTokenizer.from_pretrained(smollm2_dir)
    text = "Natalia sold 48 clips in April, and half as many in May. #### 72 <|im_end|>"
    assert imported.encode(text) == original.encode(text)
    rendered = imported.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered == original.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")  # the generation prompt is there for rollouts


def test_alias_weights_match_the_gguf(smollm2_dir):
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors import safe_open

    # the one tensor read and dequantised straight from the GGUF file (gguf-py, not the importer's transformers path):
    # an independent reference, and seconds instead of loading the whole model
    reader = GGUFReader(str(resolve_gguf_alias("smollm2-135m-instruct")))
    [tensor] = [t for t in reader.tensors if t.name == "blk.3.ffn_down.weight"]
    with safe_open(smollm2_dir / "model.safetensors", "pt") as f:
        saved = f.get_tensor("model.layers.3.mlp.down_proj.weight")
    expected = torch.from_numpy(np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32))
    assert expected.shape == saved.shape == (576, 1536)  # GGUF lists dimensions innermost first: [1536, 576]
    # saved in bf16: equal to the dequantised fp32 weight up to bf16 rounding (relative 2^-8)
    assert saved.dtype == torch.bfloat16
    torch.testing.assert_close(saved.float(), expected, rtol=2**-8, atol=0)


def test_second_import_reuses_the_output(smollm2_dir):
    before = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    assert import_model("smollm2-135m-instruct", smollm2_dir) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == before


def test_hf_folder_and_mlflow_folder_import(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    out = import_model(str(tiny_model_dir), tmp_path / "from-hf", dtype="float32")
    assert json.loads((out / "import_source.json").read_text())["kind"] == "hf"
    # MLflow's transformers flavour keeps the weights under model/ and the tokenizer under components/tokenizer/
    mlflow = tmp_path / "mlflow-model"
    shutil.copytree(tiny_model_dir, mlflow / "model")
    shutil.copytree(tiny_model_dir, mlflow / "components" / "tokenizer")
    (mlflow / "MLmodel").write_text("flavors:\n  transformers: {}\n")
    out2 = import_model(str(mlflow), tmp_path / "from-mlflow", dtype="float32")
    a = AutoModelForCausalLM.from_pretrained(out).state_dict()
    b = AutoModelForCausalLM.from_pretrained(out2).state_dict()
    assert all((a[k] == b[k]).all() for k in a)


def test_hub_id_not_cached_names_id_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ModelImportError, match=r"hub id 'nobody/not-a-model' is not in the local Hugging Face cache \("
    ):
        import_model("nobody/not-a-model", tmp_path / "out")


def test_folder_that_is_not_a_model_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelImportError, match=r"empty is a folder but neither a Hugging Face model"):
        import_model(str(tmp_path / "empty"), tmp_path / "out")


def test_output_holding_something_else_is_refused(tiny_model_dir, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ModelImportError, match=r"busy exists and holds something other than an import"):
        import_model(str(tiny_model_dir), out)
    assert (out / "notes.txt").read_text() == "mine"  # nothing already written is lost


def test_cli_reports_error_and_exit_code(tmp_path, capsys):
    assert main(["--source", str(tmp_path / "missing.gguf"), "--output", str(tmp_path / "o")]) == 2
    assert "missing.gguf" in capsys.readouterr().err


def test_a_gguf_named_file_that_is_not_gguf_ends_with_one_line(tmp_path, capfd):
    bad = tmp_path / "bad.gguf"
    bad.write_text("<html>rate limited</html>")
    assert main(["--source", str(bad), "--output", str(tmp_path / "o")]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [
        f"error: --source {bad} is not a GGUF file: it starts with b'<htm', a GGUF file with b'GGUF'; "
        "expected a .gguf model file, a Hugging Face folder, an MLflow model folder or a cached hub id"
    ]
    assert not (tmp_path / "o").exists()


def test_a_missing_option_ends_with_one_line(capfd):
    with pytest.raises(SystemExit) as done:
        main(["--output", "x"])
    assert done.value.code == 2
    assert capfd.readouterr().err.strip().splitlines() == [
        "error: python -m app.import_model: the following arguments are required: --source (--help lists the options)"
    ]


def test_within_gguf_read_once_a_file_is_parsed_once_and_the_name_map_built_once(tmp_path):
    import gguf

    from app.import_model import gguf_read_once

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader_class, name_map_function = gguf.GGUFReader, gguf.get_tensor_name_map
    llama = gguf.MODEL_ARCH.LLAMA
    with pytest.raises(RuntimeError, match="inside"):
        with gguf_read_once():
            first = gguf.GGUFReader(str(path))
            assert gguf.GGUFReader(path) is first  # the same file, named as a str or a Path: one parse
            assert first.fields["llama.block_count"].parts[-1][0] == 2  # a real reader of the file
            assert gguf.get_tensor_name_map(llama, 2) is gguf.get_tensor_name_map(llama, 2)
            assert gguf.get_tensor_name_map(llama, 3) is not gguf.get_tensor_name_map(llama, 2)
            raise RuntimeError("inside")
    # gguf-py's own functions are back, even after an error in the block: outside it nothing is memoised
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map_function)
    assert gguf.GGUFReader(str(path)) is not gguf.GGUFReader(str(path))
