"""recsys.process_settings through torch's default dtype, which two fits in a notebook's threads share."""

import threading

import torch

from recsys.models.layers import float32_default


def test_a_models_dtype_block_holds_in_one_thread_while_another_closes_and_the_callers_comes_back() -> None:
    """Under a float64 default, a first fit's block opens, a second's opens in another thread, the
    first closes: the second's model must still be built in float32, and the caller's float64 must
    come back after the second closes (it had found the first's float32 and given that back)."""
    first_open, second_open, first_closed = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, torch.dtype] = {}

    def first() -> None:
        with float32_default():
            first_open.set()
            second_open.wait(10)
        first_closed.set()

    def second() -> None:
        first_open.wait(10)
        with float32_default():
            second_open.set()
            first_closed.wait(10)
            seen["built after the first closed"] = torch.nn.Linear(2, 2).weight.dtype

    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        runs = [threading.Thread(target=first), threading.Thread(target=second)]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(before)
    assert seen == {"built after the first closed": torch.float32}
