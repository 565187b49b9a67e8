"""Example plug-in of the attention-dynamics-theory toolkit: Saxe, McClelland, Ganguli (ICLR 2014),
*Exact solutions to the nonlinear dynamics of learning in deep linear neural networks*.

Packages
--------
topic     the topic ``saxe_linear``: its ``PAPER`` and its closed forms (entry-point group
          ``attention_dynamics_theory.topics``)
checks    its checks (entry-point group ``attention_dynamics_theory.checks``)
dynamics  the two-layer network set-up shared by the checks (numpy)

Nothing here is imported by ``import saxe_linear_network``: the core imports the two packages
through their entry points when it first needs them.
"""
