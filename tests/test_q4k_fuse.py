"""Stacked projections (quant.Q4KGroup, fuse_q4k, quantize_model_q4_k_m(fuse=True)): the
layers a block calls on one input run as one gemv, and the model computes what the
unstacked one does; the held output is reused only for the same input, unchanged, once
per member.
"""

import copy
import warnings

import pytest
import torch

from test_kernelize import tiny_llama


def quantized_pair(ik, device, tile=False):
    """The same random tiny Llama (Q4_K_M's Q6_K v_proj on layers 2, 3) quantised twice:
    unstacked, and stacked."""
    pytest.importorskip("transformers")
    model = tiny_llama(device, intermediate=768, layers=4, vocab=1024, seed=None)
    fused = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tiled weights off CUDA say they are untiled per call
        report = ik.quant.quantize_model_q4_k_m(model, tile=tile)
        fused_report = ik.quant.quantize_model_q4_k_m(fused, tile=tile, fuse=True)
    return model, fused, report, fused_report


def counting(layer):
    calls = []
    layer.register_forward_hook(lambda *_: calls.append(1))
    return calls


@pytest.mark.parametrize("tile", [False, True])
def test_fused_model_matches(ik, device, tile):
    model, fused, report, fused_report = quantized_pair(ik, device, tile)
    # Q4_K_M on 4 layers: v_proj is Q6_K on layers 2 and 3, so there q and k stack alone.
    extra = {k: v for k, v in fused_report.items() if k not in report}
    assert {k: v for k, v in fused_report.items() if k in report} == report
    assert extra == {
        **{f"model.layers.{i}.self_attn.q_k_v_proj": "Q4_K: q_proj, k_proj, v_proj" for i in (0, 1)},
        **{f"model.layers.{i}.self_attn.q_k_proj": "Q4_K: q_proj, k_proj" for i in (2, 3)},
        **{f"model.layers.{i}.mlp.gate_up_proj": "Q4_K: gate_proj, up_proj" for i in range(4)},
    }
    attn = fused.model.layers[1].self_attn
    assert isinstance(attn.q_proj, ik.quant.Q4KPart) and attn.q_k_v_proj.tiled == tile
    assert isinstance(fused.model.layers[2].self_attn.v_proj, ik.quant.Q4KLinear)
    ids = torch.randint(0, 1024, (2, 9), device=device)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in (ids, ids[:, -1:]):  # 18 rows (dequantise + matmul), 2 rows (gemv)
            torch.testing.assert_close(fused(x).logits, model(x).logits, rtol=1e-4, atol=1e-4)


def test_group_runs_once_per_input(ik, device):
    _, fused, _, _ = quantized_pair(ik, device)
    attn = fused.model.layers[1].self_attn
    calls = counting(attn.q_k_v_proj)
    w = attn.q_k_v_proj.dequantized_weight().double()
    parts = [attn.q_proj, attn.k_proj, attn.v_proj]
    bounds = attn.q_proj.group.bounds
    x = torch.randn(3, 256, device=device)
    with torch.no_grad():
        ys = [p(x) for p in parts]
        assert len(calls) == 1
        for i, y in enumerate(ys):
            torch.testing.assert_close(y.double(), x.double() @ w[bounds[i]:bounds[i + 1]].T,
                                       rtol=1e-5, atol=1e-5)
        # In any order; a member asking twice runs it again.
        assert torch.equal(attn.v_proj(x), ys[2]) and len(calls) == 2
        assert torch.equal(attn.q_proj(x), ys[0]) and len(calls) == 2
        assert torch.equal(attn.q_proj(x), ys[0]) and len(calls) == 3
        # A new tensor with the same values, and an in-place write, run it again.
        attn.k_proj(x.clone())
        assert len(calls) == 4
        x.mul_(2)
        y2 = attn.k_proj(x)
        assert len(calls) == 5
        torch.testing.assert_close(y2, 2 * ys[1], rtol=1e-5, atol=1e-5)


def test_inference_mode_runs_each_members_rows(ik, device):
    model, fused, _, _ = quantized_pair(ik, device)
    ref_attn, attn = model.model.layers[1].self_attn, fused.model.layers[1].self_attn
    calls = counting(attn.q_k_v_proj)
    with torch.inference_mode():
        x = torch.randn(2, 256, device=device)
        for name in ("q_proj", "k_proj", "v_proj"):
            torch.testing.assert_close(getattr(attn, name)(x), getattr(ref_attn, name)(x), rtol=0, atol=0)
    assert not calls  # forward_rows, not the fused forward


def test_fused_state_dict_and_copies(ik, device):
    _, fused, _, _ = quantized_pair(ik, device)
    with torch.no_grad():
        fused.model.layers[1].self_attn.q_proj(torch.randn(1, 256, device=device))  # an output held
    state = fused.state_dict()
    assert "model.layers.1.self_attn.q_k_v_proj.qweight" in state
    assert not any(k.startswith("model.layers.1.self_attn.q_proj.") for k in state)
    other = copy.deepcopy(fused)
    attn = other.model.layers[1].self_attn
    assert attn.q_proj.group.fused is attn.q_k_v_proj  # the copy's parts read the copy's weight
    attn.q_k_v_proj.qweight.zero_()
    ids = torch.randint(0, 1024, (1, 3), device=device)
    with torch.no_grad():
        assert not torch.equal(other(ids).logits, fused(ids).logits)
        other.load_state_dict(state)
        torch.testing.assert_close(other(ids).logits, fused(ids).logits, rtol=0, atol=0)


def test_fuse_refuses_what_does_not_stack(ik, device):
    lin = lambda n, bias=False: ik.quant.Q4KLinear.from_linear(  # noqa: E731
        torch.nn.Linear(256, n, bias=bias, device=device))
    parent = torch.nn.Module()
    parent.q_proj, parent.k_proj, parent.v_proj = lin(32), lin(24), lin(32)  # k: not 16-row
    assert ik.quant.fuse_q4k(parent, ("q_proj", "k_proj", "v_proj")) is None
    parent.k_proj = lin(32, bias=True)  # bias on one only
    assert ik.quant.fuse_q4k(parent, ("q_proj", "k_proj", "v_proj")) is None
    assert isinstance(parent.q_proj, ik.quant.Q4KLinear)
    parent.k_proj = lin(32)
    parent.q_k_v_proj = torch.nn.Identity()
    with pytest.raises(ValueError, match="already has an attribute 'q_k_v_proj'"):
        ik.quant.fuse_q4k(parent, ("q_proj", "k_proj", "v_proj"))
    assert isinstance(parent.q_proj, ik.quant.Q4KLinear)  # nothing changed
    with pytest.raises(ValueError, match="do not add up"):
        ik.quant.Q4KGroup(lin(32), [16, 32])
    with pytest.raises(ValueError, match="tiles"):
        lin(48).tile_().forward_rows(torch.randn(1, 256, device=device), 8, 24)


def test_fused_model_under_torch_compile(ik, device):
    # A decode step with transformers' StaticCache, compiled whole (fullgraph: what a
    # compiled generate or a CUDA graph of the step needs), against the eager step.
    from transformers import StaticCache

    _, fused, _, _ = quantized_pair(ik, device)
    ids = torch.randint(0, 1024, (1, 8), device=device)

    def step(cache, nxt, pos):
        return fused(input_ids=nxt, past_key_values=cache, cache_position=pos, use_cache=True).logits

    def run(stepfn):
        cache = StaticCache(config=fused.config, max_cache_len=32)
        out = fused(input_ids=ids, past_key_values=cache, cache_position=torch.arange(8, device=device),
                    use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        return lambda: stepfn(cache, nxt, torch.tensor([8], device=device))

    def gemvs(fn):
        with torch.profiler.profile() as prof:
            y = fn()
        return y, sum(e.count for e in prof.key_averages() if e.key.endswith(("q4k_gemv", "q6k_gemv")))

    with torch.no_grad():
        ref, eager_calls = gemvs(run(step))
        compiled = torch.compile(step, fullgraph=True)
        run(compiled)()  # compiles (tracing runs the ops too)
        got, compiled_calls = gemvs(run(compiled))
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    # A token: per layer one q/k(/v) gemv (v apart where it is Q6_K: layers 2, 3), o,
    # gate/up, down; and the head. Unstacked it would be 7 a layer + 1 = 29.
    assert eager_calls == compiled_calls == 4 * 4 + 2 + 1


def test_kernelized_llama_mlp_runs_one_gemv_for_gate_and_up(ik, device):
    from kernels import use_kernel_forward_from_hub
    from test_kernelize import count_calls, kernelize_with
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    @use_kernel_forward_from_hub("LlamaMLP")
    class HubLlamaMLP(LlamaMLP):
        pass

    mlp = HubLlamaMLP(LlamaConfig(hidden_size=256, intermediate_size=768, hidden_act="silu"))
    model = torch.nn.Sequential(mlp.to(device).eval())
    report = ik.quant.quantize_model_q4_k_m(model, fuse=True)
    assert report["0.gate_up_proj"] == "Q4_K: gate_proj, up_proj"
    x = torch.randn(2, 3, 256, device=device)
    with torch.no_grad():
        ref = model(x)  # transformers' forward over the parts
    kernelize_with(model, device, LlamaMLP="LlamaMLP")
    y, gemvs = count_calls(ik.ops.q4k_gemv.default, lambda: model(x))
    assert gemvs == 2  # gate and up in one, then down
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
