"""Stand-in for the `expecttest` package, which Debian does not ship but which
torch.testing._internal.common_utils imports (PyTorch 1.13). The OpInfo test
only needs the import to succeed: the flag that says whether expected outputs
are rewritten, and a TestCase base class. Expect-style assertions are not used."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    """A plain unittest.TestCase; assertExpectedInline is never called here."""

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (unittest naming)
        raise NotImplementedError("expecttest stand-in: inline expectations are not supported")
