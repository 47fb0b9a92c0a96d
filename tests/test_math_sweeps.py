"""The every-float sweeps of the math helpers that test_math_helpers.py does not run itself
(SWEEP_OTHERS: tanh, erf, the logs, expm1, sinh, cosh, exp2), in a file of their own so that the
suite's two workers share the sweeps (pytest-xdist's --dist loadfile gives each file to one
worker); what each checks is test_math_helpers.every_float's docstring."""
import pytest

import test_math_helpers as mh


@pytest.mark.slow
@pytest.mark.parametrize("name", mh.SWEEP_OTHERS)
def test_every_float(tmp_path, name):
    mh.every_float(tmp_path, name)
