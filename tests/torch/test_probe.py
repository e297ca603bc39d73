"""Counting saved storages, the backward's peak, timing: against hand counts on tiny graphs."""

import torch

from sappkit.torch.probe import KeptStorages, backward_peak, elapsed_ms, tensors

CPU = torch.device("cpu")


def test_each_saved_storage_counts_once():
    x = torch.randn(8, 4, requires_grad=True)
    kept = KeptStorages(set())
    with kept.saving():
        y = x.exp()  # saves its result
        z = y * y  # saves y twice: one storage
        view = z[:, :2]  # slicing saves nothing
    assert kept.nbytes() == y.untyped_storage().nbytes() == 8 * 4 * 4
    del view


def test_excluded_storages_and_dropped_branches_do_not_count():
    x = torch.randn(8, 4, requires_grad=True)
    kept = KeptStorages({x.untyped_storage().data_ptr()})
    with kept.saving():
        y = x.sin()  # saves x: excluded
        dropped = (x * 2).exp()  # saves its result, then the branch is dropped
        del dropped
    assert kept.nbytes() == 0
    kept.cache((torch.zeros(3), [torch.zeros(2, dtype=torch.int64)]))
    assert kept.nbytes() == 3 * 4 + 2 * 8
    del y


def test_tensors_walks_nested_containers():
    a, b, c = torch.zeros(1), torch.zeros(2), torch.zeros(3)
    assert [t.numel() for t in tensors({"x": (a, [b, "text"]), "y": c, "z": None})] == [1, 2, 3]


def test_backward_peak_of_a_linear_layer_is_its_three_gradients():
    n, h = 64, 32
    weight = torch.randn(h, h, requires_grad=True)
    x = torch.randn(n, h, requires_grad=True)

    def forward():
        return x @ weight

    def backward(out):
        out.backward(torch.ones_like(out))

    backward(forward())  # allocates the gradients the measured backward accumulates into
    # The incoming gradient, the input's and the weight's: 4·(2nh + h²) bytes at once.
    assert backward_peak(forward, backward, CPU) == 4 * (2 * n * h + h * h)


def test_elapsed_ms_returns_the_result_and_a_duration():
    result, ms = elapsed_ms(lambda: 42, CPU)
    assert result == 42 and ms >= 0
