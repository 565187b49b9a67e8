"""Saxe, McClelland, Ganguli 2014: exact learning dynamics of a two-layer linear network.

Modules: :mod:`.modes` (the sigmoidal trajectory of one input-output mode under gradient flow
from a small balanced initialisation, and the time it takes to reach a given strength).
"""

from theory import Paper, Symbols

#: The paper of this topic; the topic's name (``saxe_linear``) is the entry point's name.
PAPER = Paper(authors=("Saxe", "McClelland", "Ganguli"), year=2014,
              title="Exact solutions to the nonlinear dynamics of learning in deep linear neural networks",
              venue="ICLR 2014", arxiv="1312.6120", url="https://openreview.net/forum?id=_wzZwKpTDF_9C")

#: The symbols of this paper: time t is nonnegative; every other name (s, u0, u_f, tau) a positive
#: real. Modules write ``from . import sym`` and ``sym("s")``.
SYMBOLS = Symbols(nonnegative=("t",))
sym = SYMBOLS
