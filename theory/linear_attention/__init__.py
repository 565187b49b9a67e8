"""Zhang, Singh, Latham, Saxe (ICML 2025), *Training Dynamics of In-Context Learning in
Linear Attention*.

Modules
-------
data    moments of the in-context regression task (App. C.1, D.4)
merged  the merged key-query model ATTN_M (§3, App. D)
ntp     varying context length and the next-token loss (App. A.1)
"""
