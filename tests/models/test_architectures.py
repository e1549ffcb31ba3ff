"""Parameter sharing is real: which tensors the towers share, freeze, and route through."""

from __future__ import annotations

import pytest
import torch

from odqa.models.retriever import create_retriever


def _pointers(module: torch.nn.Module) -> set[int]:
    return {p.data_ptr() for p in module.parameters()}


def _inputs(retriever, questions=("who wrote hamlet", "capital of france")):
    return retriever.tokenize_questions(list(questions))


def _passages(retriever):
    return retriever.tokenize_passages(
        ["Hamlet", "Paris"], ["A play by Shakespeare.", "The capital of France."]
    )


def test_sde_towers_are_the_same_tensors(tiny_checkpoint):
    model = create_retriever("sde", tiny_checkpoint)
    assert model.question_tower is model.passage_tower
    assert model.parameter_count() == sum(p.numel() for p in model.question_tower.parameters())
    inputs = _inputs(model)
    torch.testing.assert_close(model.embed_questions(inputs), model.embed_passages(inputs))


def test_ade_towers_share_nothing(tiny_checkpoint):
    model = create_retriever("ade", tiny_checkpoint)
    assert not _pointers(model.question_tower) & _pointers(model.passage_tower)
    assert model.parameter_count() == 2 * sum(p.numel() for p in model.question_tower.parameters())


def test_ade_ste_shares_only_the_token_embedder(tiny_checkpoint):
    model = create_retriever("ade-ste", tiny_checkpoint)
    shared = _pointers(model.question_tower) & _pointers(model.passage_tower)
    assert shared == _pointers(model.question_tower.encoder.embeddings)
    assert shared == _pointers(model.passage_tower.encoder.embeddings)
    assert all(p.requires_grad for p in model.parameters())


def test_ade_fte_freezes_the_token_embedder_only(tiny_checkpoint):
    model = create_retriever("ade-fte", tiny_checkpoint)
    frozen = {p.data_ptr() for p in model.parameters() if not p.requires_grad}
    assert frozen == _pointers(model.question_tower.encoder.embeddings)
    assert frozen == _pointers(model.passage_tower.encoder.embeddings)
    assert not (
        _pointers(model.question_tower.encoder.encoder) & _pointers(model.passage_tower.encoder.encoder)
    )


def test_ade_spl_shares_only_the_projection(tiny_checkpoint):
    model = create_retriever("ade-spl", tiny_checkpoint, projection_dim=16)
    assert not _pointers(model.question_tower) & _pointers(model.passage_tower)
    assert model.embedding_dim == 16
    q = model.embed_questions(_inputs(model))
    p = model.embed_passages(_passages(model))
    assert q.shape == p.shape == (2, 16)
    (q.sum() + p.sum()).backward()
    # The one projection layer receives gradient from both sides; the towers only from their own.
    assert model.projection.weight.grad is not None
    model.zero_grad(set_to_none=True)
    model.embed_questions(_inputs(model)).sum().backward()
    assert all(p.grad is None for p in model.passage_tower.parameters())
    assert model.projection.weight.grad is not None


@pytest.mark.parametrize(
    ("side", "frozen_tower"), [("question", "question_tower"), ("passage", "passage_tower")]
)
def test_fix_q_and_fix_p_freeze_one_tower(tiny_checkpoint, side, frozen_tower):
    model = create_retriever("dpr", tiny_checkpoint, freeze=side)
    other = "passage_tower" if frozen_tower == "question_tower" else "question_tower"
    assert not any(p.requires_grad for p in getattr(model, frozen_tower).parameters())
    assert all(p.requires_grad for p in getattr(model, other).parameters())


def test_freezing_one_side_of_a_shared_encoder_is_refused(tiny_checkpoint):
    with pytest.raises(ValueError, match="two towers"):
        create_retriever("sde", tiny_checkpoint, freeze="question")


def test_taser_layout_specializes_every_third_block(tiny_checkpoint):
    model = create_retriever("taser", tiny_checkpoint)
    assert model.config.taser.specialized_layers == [2]  # 3 layers, T=2: shared, shared, specialized
    layers = model.encoder.encoder.layer
    assert len(layers[2].output.experts) == 2
    assert not hasattr(layers[0].output, "experts")
    # Experts start as copies of the pretrained FFN.
    experts = layers[2].output.experts
    torch.testing.assert_close(experts[0].dense_in.weight, experts[1].dense_in.weight)
    assert experts[0].dense_in.weight.data_ptr() != experts[1].dense_in.weight.data_ptr()


def test_taser_det_routes_question_gradients_to_q_experts_and_passage_gradients_to_p_experts(tiny_checkpoint):
    model = create_retriever("taser", tiny_checkpoint)
    specialized = [model.encoder.encoder.layer[i].output for i in model.config.taser.specialized_layers]

    def grads(expert):
        return [p.grad for p in expert.parameters()]

    model.embed_questions(_inputs(model)).pow(2).sum().backward()
    for block in specialized:
        assert all(g is not None and g.abs().sum() > 0 for g in grads(block.experts[0]))
        assert all(g is None for g in grads(block.experts[1]))
    model.zero_grad(set_to_none=True)
    model.embed_passages(_passages(model)).pow(2).sum().backward()
    for block in specialized:
        assert all(g is None for g in grads(block.experts[0]))
        assert all(g is not None and g.abs().sum() > 0 for g in grads(block.experts[1]))
    # The shared blocks learn from both sides.
    assert model.encoder.encoder.layer[0].attention.self.query.weight.grad is not None


def test_taser_det_starts_equal_to_the_shared_encoder(tiny_checkpoint):
    taser = create_retriever("taser", tiny_checkpoint)
    sde = create_retriever("sde", tiny_checkpoint)
    inputs = _inputs(taser)
    torch.testing.assert_close(taser.embed_questions(inputs), sde.embed_questions(inputs))


@pytest.mark.parametrize("routing", ["seq", "tok"])
def test_taser_learned_routing_trains_router_with_entropy(tiny_checkpoint, routing):
    torch.manual_seed(0)
    model = create_retriever("taser", tiny_checkpoint, routing=routing, num_experts=4)
    block = model.encoder.encoder.layer[2].output
    assert block.router is not None and block.router.out_features == 4
    model.train()
    output = model(_inputs(model), _passages(model))
    assert output.aux_loss is not None
    entropy = output.stats["routing_entropy"]
    assert 0.0 <= entropy <= torch.log(torch.tensor(4.0)).item() + 1e-6
    torch.testing.assert_close(output.aux_loss, torch.tensor(-0.01 * entropy), atol=1e-6, rtol=1e-5)
    (output.questions.sum() + output.passages.sum() + output.aux_loss).backward()
    assert block.router.weight.grad is not None and block.router.weight.grad.abs().sum() > 0
    model.eval()
    inputs = _inputs(model)
    torch.testing.assert_close(model.embed_questions(inputs), model.embed_questions(inputs))
    assert model.context.probabilities == []  # inference does not accumulate routing statistics


def test_taser_shared_has_one_expert_and_no_router(tiny_checkpoint):
    model = create_retriever("taser-shared", tiny_checkpoint)
    block = model.encoder.encoder.layer[2].output
    assert len(block.experts) == 1 and block.router is None
    assert model.parameter_count() == create_retriever("sde", tiny_checkpoint).parameter_count()


def test_desire_me_with_zero_gates_returns_the_base_query(tiny_checkpoint):
    model = create_retriever("desire-me", tiny_checkpoint, domains=["Culture", "Science", "History"])
    final = model.gate.layers[-1]
    with torch.no_grad():
        final.weight.zero_()
        final.bias.fill_(-1e4)  # sigmoid underflows to exactly 0
    inputs = _inputs(model)
    torch.testing.assert_close(
        model.embed_questions(inputs), model.base.embed_questions(inputs), rtol=0, atol=0
    )
    passages = _passages(model)
    torch.testing.assert_close(model.embed_passages(passages), model.base.embed_passages(passages))


def test_desire_me_gates_change_the_query_and_train_only_the_moe(tiny_checkpoint):
    model = create_retriever("desire-me", tiny_checkpoint, domains=["Culture", "Science"])
    inputs = _inputs(model)
    assert not torch.allclose(model.embed_questions(inputs), model.base.embed_questions(inputs))
    assert not any(p.requires_grad for p in model.base.parameters())
    trainable = model.parameter_count(trainable_only=True)
    hidden = model.embedding_dim
    gate = (hidden * 2 * hidden + 2 * hidden) + (2 * hidden * 4 * hidden + 4 * hidden) + (4 * hidden * 2 + 2)
    specializers = 2 * ((hidden * (hidden // 2) + hidden // 2) + ((hidden // 2) * hidden + hidden))
    assert trainable == gate + specializers
    output = model(inputs, _passages(model), torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    assert output.aux_loss is not None and output.aux_loss > 0
    (output.questions.sum() + output.aux_loss).backward()
    assert model.gate.layers[0].weight.grad is not None
    assert model.specializers[0].down.weight.grad is not None


def test_rnd_g_weights_are_random_but_repeatable(tiny_checkpoint):
    model = create_retriever("rnd-g", tiny_checkpoint, domains=["A", "B", "C"])
    model.eval()
    inputs = _inputs(model)
    first = model.embed_questions(inputs)
    torch.testing.assert_close(first, model.embed_questions(inputs))
    weights = model._random_weights(inputs, 3)
    assert weights.shape == (2, 3) and not torch.allclose(weights[0], weights[1])
