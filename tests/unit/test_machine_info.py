"""Results name the processor's instruction sets and the runtimes' versions."""

from __future__ import annotations

from nmt_specdec.evaluation.machine import cpu_isa, cpu_model, runtime_versions
from nmt_specdec.evaluation.report import machine_line


def test_cpu_isa_reads_the_flags(tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: Some CPU\nflags\t\t: fpu sse avx2 avx512f avx512_vnni "
                       "avx512_bf16 amx_tile\n")
    assert cpu_isa(str(cpuinfo)) == "AVX2 AVX-512 VNNI AVX512-BF16 AMX"
    cpuinfo.write_text("flags\t\t: fpu sse sse2\n")
    assert cpu_isa(str(cpuinfo)) == "no AVX2"
    assert cpu_isa(str(tmp_path / "missing")) == "unknown"


def test_cpu_model_adds_family_and_model(tmp_path) -> None:
    """A virtual machine's "AMD EPYC" alone does not tell two generations apart."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
                       "\nprocessor\t: 1\ncpu family\t: 25\nmodel\t\t: 17\n")
    assert cpu_model(str(cpuinfo)) == "AMD EPYC (family 26, model 2)"
    cpuinfo.write_text("Hardware\t: Some ARM board\n")
    assert cpu_model(str(cpuinfo)) == "Some ARM board"


def test_machine_line_names_isa_and_runtimes() -> None:
    machine = {"cpu": "AMD EPYC", "cpu_isa": "AVX2 AVX-512", "gpu": None, "device": "cpu",
               "torch_threads": 1, "torch": "2.13.0", "fairseq": "0.12.3",
               "sacrebleu": "2.6.0", **runtime_versions()}
    line = machine_line(machine)
    assert "AMD EPYC [AVX2 AVX-512] (cpu)" in line
    assert f"ONNX Runtime {machine['onnxruntime']}" in line
    assert f"CTranslate2 {machine['ctranslate2']}" in line


def test_bf16_training_only_where_the_machine_multiplies_bf16(monkeypatch) -> None:
    """``--precision auto`` trains in bf16 on CPUs with AVX512-BF16 or AMX only:
    emulated bf16 is slower than fp32."""
    from nmt_specdec.evaluation import machine
    from nmt_specdec.workflows.add_draft_head import training_precision

    monkeypatch.setattr(machine.torch.cuda, "is_available", lambda: False)
    for isa, native in (("AVX2 AVX-512 VNNI AVX512-BF16", True), ("AVX2 AVX-512 AMX", True),
                        ("AVX2 AVX-512 VNNI", False), ("unknown", False)):
        monkeypatch.setattr(machine, "cpu_isa", lambda isa=isa: isa)
        assert machine.native_bf16() is native
        assert training_precision("auto") == ("bf16" if native else "fp32")
        assert training_precision("fp32") == "fp32"
        assert training_precision("bf16") == "bf16"


def test_vnni_is_read_from_the_flags(tmp_path) -> None:
    """8-bit integer weights only where the runtime adds their products in 32 bits."""
    from nmt_specdec.cpu_flags import has_vnni

    cpuinfo = tmp_path / "cpuinfo"
    for flags, vnni in (("avx2 avx512f avx512_vnni", True), ("avx2 avx_vnni", True),
                        ("avx2 avx512f avx512_bf16", False)):
        cpuinfo.write_text(f"model name\t: Some CPU\nflags\t\t: fpu {flags}\n")
        assert has_vnni(str(cpuinfo)) is vnni, flags
    assert has_vnni(str(tmp_path / "missing")) is False
