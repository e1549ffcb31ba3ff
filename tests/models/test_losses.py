"""Objectives: DPR/TASER contrastive NLL, thesis stop-gradient and flipped losses, routing entropy."""

from __future__ import annotations

import math

import torch

from odqa.models.losses import (
    contrastive_loss,
    domain_bce,
    flipped_contrastive_loss,
    routing_entropy,
    stop_gradient_loss,
)


def _embeddings(seed: int = 0, questions: int = 3, passages: int = 6, dim: int = 5):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(questions, dim, generator=generator, requires_grad=True)
    p = torch.randn(passages, dim, generator=generator, requires_grad=True)
    return q, p


def test_contrastive_loss_is_the_nll_of_the_positive_among_in_batch_and_hard_negatives():
    q, p = _embeddings()
    scores = q @ p.T
    expected = -torch.stack([scores[i].log_softmax(0)[i] for i in range(3)]).mean()
    torch.testing.assert_close(contrastive_loss(q, p), expected)
    targets = torch.tensor([2, 0, 5])
    expected = -torch.stack([scores[i].log_softmax(0)[t] for i, t in enumerate(targets)]).mean()
    torch.testing.assert_close(contrastive_loss(q, p, targets), expected)
    scaled = -torch.stack([(scores[i] / 0.1).log_softmax(0)[i] for i in range(3)]).mean()
    torch.testing.assert_close(contrastive_loss(q, p, temperature=0.1), scaled)


def test_stop_gradient_loss_has_the_contrastive_value_and_half_gradients_per_side():
    q, p = _embeddings(1)
    reference = contrastive_loss(q, p)
    grad_q, grad_p = torch.autograd.grad(reference, (q, p))
    loss = stop_gradient_loss(q, p)
    torch.testing.assert_close(loss, reference)
    sg_q, sg_p = torch.autograd.grad(loss, (q, p))
    torch.testing.assert_close(sg_q, 0.5 * grad_q)
    torch.testing.assert_close(sg_p, 0.5 * grad_p)


def test_flipped_loss_scores_questions_for_each_positive_passage():
    q, p = _embeddings(2)
    scores = p[:3] @ q.T
    expected = -torch.stack([scores[i].log_softmax(0)[i] for i in range(3)]).mean()
    torch.testing.assert_close(flipped_contrastive_loss(q, p), expected)
    assert not torch.isclose(flipped_contrastive_loss(q, p), contrastive_loss(q, p))


def test_routing_entropy_of_mean_distribution_per_block():
    uniform = torch.full((4, 2), 0.5)
    collapsed = torch.tensor([[1.0, 0.0]] * 4)
    # One block, two calls (questions, passages): balanced overall even though each call is one-sided.
    balanced = routing_entropy([torch.tensor([[1.0, 0.0]] * 3), torch.tensor([[0.0, 1.0]] * 3)], 1)
    torch.testing.assert_close(balanced, torch.tensor(math.log(2)))
    torch.testing.assert_close(routing_entropy([uniform], 1), torch.tensor(math.log(2)))
    torch.testing.assert_close(routing_entropy([collapsed], 1), torch.tensor(0.0))
    # Two blocks: entries alternate block 0, block 1 per call; the result averages the blocks.
    torch.testing.assert_close(
        routing_entropy([uniform, collapsed, uniform, collapsed], 2), torch.tensor(math.log(2) / 2)
    )


def test_domain_bce_matches_binary_cross_entropy():
    logits = torch.tensor([[2.0, -1.0], [0.0, 3.0]])
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    expected = -(
        targets * torch.sigmoid(logits).log() + (1 - targets) * (1 - torch.sigmoid(logits)).log()
    ).mean()
    torch.testing.assert_close(domain_bce(logits, targets), expected)


def test_copies_of_a_questions_positive_are_not_its_negatives():
    from odqa.models.losses import duplicate_positive_mask

    # Questions 0 and 1 share a paragraph (keys 7); question 2's hard negative (column 4) is
    # question 0's positive too.
    keys = torch.tensor([7, 7, 9, 3, 7, 5])
    targets = torch.tensor([0, 1, 2])
    exclude = duplicate_positive_mask(keys, targets)
    assert exclude.tolist() == [
        [False, True, False, False, True, False],
        [True, False, False, False, True, False],
        [False, False, False, False, False, False],
    ]
    q, p = _embeddings(2)
    scores = q @ p.T
    kept = [[j for j in range(6) if not exclude[i, j]] for i in range(3)]
    expected = -torch.stack([scores[i, kept[i]].log_softmax(0)[kept[i].index(i)] for i in range(3)]).mean()
    torch.testing.assert_close(contrastive_loss(q, p, targets, 1.0, exclude), expected)
    # Flipped: passage 0 must pick question 0 among the questions; question 1 has the same
    # positive, so it is no negative of passage 0 (and vice versa).
    positives = p[targets]
    flipped_scores = positives @ q.T
    drop = {0: [1], 1: [0], 2: []}
    expected_flipped = -torch.stack([
        flipped_scores[i, [j for j in range(3) if j not in drop[i]]].log_softmax(0)[
            [j for j in range(3) if j not in drop[i]].index(i)] for i in range(3)]).mean()  # fmt: skip
    torch.testing.assert_close(flipped_contrastive_loss(q, p, targets, 1.0, exclude), expected_flipped)
