"""The Wikipedia corpus's lengths beside the checkout (../shared/data/wikipedia_lengths.txt, not in
the repository; the built-in "wikipedia" distribution is fitted to it) and the plan tool's
`--lengths` sampling of it reproduced in Python: what the SP and FlexSP studies share. The code
corpus (../code_lengths.txt, the built-in "code" distribution's) is made on the machine by
benchmarks/tools/code_lengths.py."""

from lib.results import ROOT

CORPUS = ROOT.parent / "shared" / "data" / "wikipedia_lengths.txt"
SHOWN = "../shared/data/wikipedia_lengths.txt"  # the path as the pages show it, from the checkout
CODE_CORPUS = ROOT.parent / "code_lengths.txt"
CODE_SHOWN = "../code_lengths.txt"


def lengths(path=CORPUS):
    """The corpus's lengths, or None when it is not there."""
    return [int(x) for x in path.read_text().split()] if path.exists() else None


class Mt19937_64:
    """std::mt19937_64, for the plan tool's corpus sampler (src/data/empirical_lengths.cc)."""

    def __init__(self, seed):
        m = (1 << 64) - 1
        self.mt = [seed & m]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & m)
        self.i = 312

    def __call__(self):
        m = (1 << 64) - 1
        if self.i >= 312:
            mt = self.mt
            for k in range(312):
                y = (mt[k] & 0xFFFFFFFF80000000) | (mt[(k + 1) % 312] & 0x7FFFFFFF)
                v = mt[(k + 156) % 312] ^ (y >> 1)
                if y & 1:
                    v ^= 0xB5026F5AA96619E9
                mt[k] = v
            self.i = 0
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & m


def corpus_sample(corpus, batch, context, seed):
    """The plan tool's --lengths sampling: batch uniform draws from the corpus, truncated."""
    rng = Mt19937_64(seed)
    last = len(corpus) - 1
    out = []
    for _ in range(batch):
        u = (rng() >> 11) * 2.0**-53
        out.append(min(corpus[int(u * (last + 1))], context))
    return out
