"""The attention dispatcher: ``dot_product_attention``, a drop-in for ``jax.nn.dot_product_attention``.

Shapes follow jax.nn: query [B, T, N, H], key and value [B, S, K, H] with N a
multiple of K (GQA; K == N is ordinary multi-head attention), bias and mask
broadcastable to [B, N, T, S]. ``dot_product_attention`` checks the inputs,
picks an implementation by the measured rule below (``select_implementation``)
and runs it: dense (``scaling.dense_attention``, whose logits and weights are
what the metrics measure), blockwise (``scaling.blockwise``), the Pallas kernel
(``scaling.pallas_attention``) or jax.nn's cuDNN kernel (here). The pieces they
share (logit options, input checks, logit shaping, the softmax) live in
``scaling.logits``; the names users import from this module are re-exported.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from scaling import autotune
from scaling import blockwise as blockwise_lib
from scaling import dense_attention as dense_lib
from scaling import logits as logits_lib
from scaling import pallas_attention as pallas_lib
from scaling import rules as rules_lib
# Re-exported: users find these names in scaling.attention.
from scaling.autotune import Choice
from scaling.blockwise import blockwise_unsupported  # pylint: disable=unused-import
from scaling.dense_attention import attention_logits  # pylint: disable=unused-import
from scaling.dense_attention import attention_logits_and_weights  # pylint: disable=unused-import
from scaling.dense_attention import attention_weights  # pylint: disable=unused-import
from scaling.dense_attention import attention_with_aux  # pylint: disable=unused-import
from scaling.logits import check_qkv  # pylint: disable=unused-import
from scaling.logits import LogitOptions
from scaling.logits import masked_softmax  # pylint: disable=unused-import
from scaling.logits import resolve_logit_options  # pylint: disable=unused-import
from scaling.logits import shape_logits  # pylint: disable=unused-import
from scaling.validation import ConfigError

Array = jax.Array


IMPLEMENTATIONS = ("dense", "xla", "blockwise", "cudnn", "pallas")
AUTO = "auto"
"""``implementation=AUTO``: the path measured fastest for the case (``scaling.autotune``); fixed rule as fallback."""

# How ``dot_product_attention(..., implementation=None)`` chooses. Measured on a 2-core CPU (float32, fwd+bwd =
# value and gradients w.r.t. q, k, v; median of interleaved calls) by timing these paths side by side, as
#   nice -n 5 python -m experiments.benchmark --suite=attention
# does; its table (docs/benchmarks.md) is the check of the rule. Time relative to jax.nn.dot_product_attention:
#
#   (B, T = S, N, H)     mask    pass      dense   blockwise 64x64   128x128   256x256   512x256
#   1, 128, 4, 64        causal  fwd+bwd   0.89    0.92              0.49      0.92      -
#   1, 256, 4, 64        causal  fwd+bwd   1.05    0.54              0.79      0.80      -
#   1, 256, 4, 64        none    fwd+bwd   0.81    0.76              0.54      0.74      -
#   4, 512, 8, 64        causal  fwd+bwd   1.11    -                 -         -         0.71
#   1, 2048, 8, 64       causal  fwd+bwd   0.61    -                 -         -         0.15
#   1, 2048, 8, 64       none    fwd+bwd   0.80    -                 -         -         0.39
#
# and blockwise block sizes against each other (fwd+bwd, B = 1, N = 4, ms):
#
#   T = S, H, mask       128x128   256x256   512x256   512x512   256x512   1024x256
#   2048, 64, causal     334       342       362       459       382       524
#   2048, 128, causal    520       713       606       873       595       925
#   2048, 64, none       383       635       1305      -         -         -
#   8192, 64, causal     6062      7093      14380     -         -         -
#
# and, side by side on a quiet machine (load average about 2; fwd+bwd, B = 1, N = 4, median ms):
#
#   T = S, H, mask       128x128   256x256   256x512   512x512
#   512, 64, causal      13        15        19        11
#   1024, 64, causal     40        -         36        -
#   1024, 128, causal    76        -         56        -
#   1024, 64, none       70        -         42        -
#   2048, 64, causal     134       141       96        114
#   2048, 128, causal    280       189       148       153
#   2048, 64, none       247       233       141       151
#   4096, 64, causal     567       -         361       -
#   4096, 128, none      1666      -         992       -
#   8192, 64, causal     2244      2075      1304      1237
#
# so from S = LARGE_BLOCKS_MIN_KV_LEN the tiles are LARGE_BLOCKS (the loaded-machine table above had favoured
# 128x128 there; its timings were 2-5x slower throughout); and in one benchmark run, with blockwise 128x128
# (time relative to jax.nn; dense forced):
#
#   (B, T = S, N, H)     mask    pass      dense   blockwise
#   1, 512, 4, 64        none    fwd       0.80    0.95
#   1, 512, 4, 128       none    fwd       0.79    1.28
#   1, 512, 4, 128       none    fwd+bwd   0.83    1.14
#   4, 512, 8, 64        none    fwd+bwd   1.12    0.69
#   1, 512, 4, 128       causal  fwd+bwd   0.73    0.69
#
# Those tables hold B·N at 4. With more heads, batch or GQA groups, side by side (fwd+bwd, causal, H = 64, median ms
# of 5-11 interleaved calls, one row per run; 1-minute load average 3.5-12, the machine shared):
#
#   (B, T = S, N, K)     64x128   64x256   128x128  128x256  256x256  128x512  256x512
#   1, 2048, 8, 2        -        299      327      301      -        404      443
#   1, 2048, 8, 2        -        -        -        344      512      518      509
#   1, 2048, 8, 2        -        531      352      327      375      -        576
#   1, 2048, 8, 1        -        308      344      319      -        -        505
#   1, 2048, 8, 8        -        -        -        372      619      911      870
#   2, 2048, 4, 4        -        -        -        683      693      -        1044
#   1, 2048, 4, 4        -        -        -        192      211      274      388
#   2, 4096, 8, 2        3590     4411     2866     3492     5348     -        6747
#   4, 512, 8, 2         100      106      180      244      414      -        -
#
# Under that load smaller tiles win (other processes share the caches). On a quiet machine (load average 1.3-1.8,
# the same script, median ms of 5 interleaved calls, fwd+bwd, causal, H = 64):
#
#   (B, T = S, N, K)     64x128   128x128  128x256  256x256  256x512
#   1, 2048, 8, 2        -        197      155      155      201
#   1, 2048, 8, 1        -        133      149      157      223
#   1, 2048, 8, 8        -        224      241      231      215
#   2, 2048, 4, 4        -        201      207      199      195
#   2, 4096, 8, 2        -        1444     1079     1137     -
#   4, 512, 8, 8         64       63       93       -        -
#
# and in the benchmark's B = 1, N = K = 4 grid 256x512 was the fastest tile at S = 2048 and 8192, causal and not,
# forward and forward+backward (256x256 took 1.06-1.6x). Batch and heads do not matter there; the GQA group G = N/K
# does: each step sweeps a [G·bq, bk] tile per key/value head. So ``blockwise_blocks`` starts from BLOCKS or
# LARGE_BLOCKS and halves block_k down to 256, then block_q down to 128, then block_k down to MIN_BLOCKS[1], then
# block_q down to MIN_BLOCKS[0], until G·bq·bk is at most TILE_MAX_ELEMENTS (LARGE_BLOCKS without GQA; 128x256 at
# G = 4, 128x128 at G = 8: the fastest tile of every row of the quiet table; in the loaded rows with G = 4, 128x256
# is within 1.01x of the best in three and 1.22x at B = 2, T = 4096).
#
# Below S = BLOCKWISE_MIN_KV_LEN the few tiles leave blockwise and dense within the machine's noise of each other
# (at S = 128 either wins by up to 2x from one run to the next), so dense, which also returns weights, is kept
# there. Without a causal mask or window there are no tiles to skip, and while the B·N·T·S logits fit in 2**20
# elements (4 MiB of float32) dense's few large matmuls beat a loop of 128x128 tiles (but not one tile: below);
# otherwise blockwise with BLOCKS (LARGE_BLOCKS from S = LARGE_BLOCKS_MIN_KV_LEN) is faster than dense and jax.nn,
# forward and forward+backward. Options blockwise lacks (``blockwise_unsupported``) fall back to dense.
#
# The forward pass alone was another matter: with a causal mask too, while the logits fit 2**20 elements, dense's
# forward beat the 128x128 tiles on both machines measured (B = 1, T = S = 512, N = 4, causal, fwd, time relative
# to jax.nn: dense 0.81 / 0.86, blockwise 128x128 1.07 / 1.24 at H = 64 / 128), while forward+backward blockwise was
# as fast or faster. That was before one tile was measured:
#
# One tile. Side by side (``python scripts/attention_tiles.py``, whose default cases these are, the H = 128 row with
# --head_dim=128: fastest of 5 interleaved calls on a 2-core CPU, H = 64 unless given; time over the fastest of
# dense and blockwise at 64x128, 128x128, 128x256, 256x256, 256x512, 512x512 and T x S), a single tile covering all
# of T x S was the fastest or within 1.08x of it forward+backward in every case whose B·N·T·S logits fit
# SINGLE_TILE_MAX_LOGITS, causal or not, and 1.4-2.5x faster than 128x128 there without a causal mask:
#
#   (B, T, N, K, S)            mask    fwd+bwd: T x S  128x128  dense     fwd: T x S  128x128  dense
#   2, 256, 8, 8, 256          causal           1.00   1.12     1.84           1.00   1.12     1.02
#   2, 256, 8, 2, 256          causal           1.03   1.29     1.00           1.00   1.48     1.12
#   2, 256, 8, 1, 256          causal           1.08   1.00     1.70           1.14   1.00     1.11
#   2, 256, 8, 8, 256          none             1.00   1.67     1.77           1.00   1.23     1.37
#   1, 512, 4, 4, 512          causal           1.00   1.29     1.70           1.00   1.55     1.09
#   1, 512, 4, 4, 512 (H 128)  causal           1.00   1.35     1.24           1.02   1.50     1.00
#   1, 512, 4, 4, 512          none             1.00   2.44     1.74           1.05   2.58     1.00
#   1, 512, 4, 1, 512          causal           1.05   1.04     1.67           1.26   1.00     1.28
#   1, 1024, 1, 1, 1024        causal           1.00   1.43     2.10           1.14   1.14     1.03
#   1, 1024, 1, 1, 1024        none             1.00   2.45     1.89           1.00   1.12     1.00
#   1, 1, 8, 8, 4096           none             1.00   1.87*    1.55           1.00   1.87*    1.15   (* 1 x 128)
#
# Past the limit it lost where measured with a causal mask (1, 1024, 2, 2, 1024: 1.40 fwd+bwd, 1.36 fwd), though
# not without one (1.00 there); the limit stays where the measurements reach. So while B·N·T·S <=
# SINGLE_TILE_MAX_LOGITS the rule runs blockwise with one T x S tile, forward and forward+backward, causal or not.
#
# Below BLOCKWISE_MIN_KV_LEN, after dense's softmax lost softmax(where=mask) (``logits.masked_softmax``), one tile
# still beat dense forward+backward while B·N·T·S <= SMALL_SINGLE_TILE_MAX_LOGITS; the forward pass alone was a
# toss-up (one tile 1.0-1.3x dense's time or dense 1.0-1.4x the tile's, 2.2x at T = 1) and stays dense, through
# ``split_forward``. (Same script, --tiles=64x64,128x128,4096x4096 --repeats=9, causal / none; time over the
# fastest of dense, 64x64, 128x128 and one tile.)
#
#   (B, T, N, K, S)     B·N·T·S   fwd+bwd: one tile     dense        fwd: one tile     dense
#   1, 16, 2, 2, 16        1024            1.00 / 1.00  1.34 / 1.00       1.00 / 1.00  1.01 / 1.41
#   4, 32, 4, 4, 32       16384            1.00 / 1.00  1.27 / 1.13       1.00 / 1.04  1.07 / 1.00
#   1, 128, 4, 4, 128     65536            1.01 / 1.00  1.21 / 1.09       1.29 / 1.00  1.39 / 1.14
#   1, 1, 8, 8, 128        1024            1.00 / 1.00  1.42 / 1.24       2.17 / 1.10  1.00 / 1.00
#   4, 100, 4, 4, 100    160000            1.00 / 1.00  1.34 / 1.15       1.03 / 1.00  1.00 / 1.20
#   16, 64, 4, 4, 64     262144            1.00 / 1.00  1.23 / 1.10       1.18 / 1.00  1.00 / 1.18
#   2, 128, 8, 1, 128    262144            1.00 / 1.00  1.40 / 1.43       1.00 / 1.13  1.07 / 1.00
#   4, 128, 8, 8, 128    524288            1.00 / 1.00  1.21 / 1.25       1.17 / 1.00  1.07 / 1.04
#   16, 128, 4, 4, 128  1048576            1.06 / 1.00  1.03 / 1.16       1.00 / 1.00  1.43 / 1.20
#   32, 64, 8, 8, 64    1048576            1.00 / 1.06  1.01 / 1.00       1.00 / 1.00  1.11 / 1.26
#   8, 128, 8, 2, 128   1048576            1.41 / 1.36  1.00 / 1.00       1.14 / 1.30  1.37 / 1.00
#   64, 128, 8, 8, 128  8388608            1.19 / 1.22  1.00 / 1.00       1.00 / 1.00  1.28 / 1.18
#
# At 2**20 logits the two took turns (and GQA G = 4 lost by 1.4), so the limit is 2**19 there: past it dense runs.
# Where the call cannot split (a bias, mask, lengths or residual) dense runs both passes, as before.
#
# Remeasured with the transposed backward (same script, --masks=causal,none --tiles=64x128,128x128,128x256,4096x4096,
# one run), one tile kept up, forward+backward within 1.04 and forward alone within 1.08, except forward+backward
# with a causal mask and a large GQA group:
#
#   (B, T, N, K, S), causal    fwd+bwd: one tile  128x128  128x256     fwd: one tile  128x128
#   2, 256, 8, 8, 256                   1.04      1.00     1.69             1.07      1.00
#   2, 256, 8, 2, 256                   1.00      1.04     1.34             1.01      1.58
#   2, 256, 8, 1, 256                   1.19      1.00     1.65             1.08      1.00
#   4, 256, 4, 4, 256                   1.01      1.00     1.68             1.03      1.00
#   1, 512, 4, 4, 512                   1.00      1.27     1.42             1.06      1.47
#
# (unmasked, one tile was the fastest or within 1.15 in every row, G = 8 included). The G = 8 row agrees with the
# benchmark's B2 T256 N8/K1 causal rows; the rule does not yet act on it.
#
# Twice more at T = S = 256, causal (--masks=causal --tiles=128x128,4096x4096 --repeats=9; B·N from 8 to 16): one
# tile took 1.01-1.16x 128x128's time forward+backward at G = 1 and 8, but 128x128 took 1.12-1.18x the one tile's
# at G = 4 (2, 256, 8, 2, 256; 1.31-1.47 forward alone); at T = S = 512 the one tile won by 1.18-1.32 at G = 1.
# A rule for T = 256 alone that excepts G = 4 would fit this machine's noise as much as the shapes, so the rule
# stays as it is.
#
# A causal mask with T < S hides every key past T (query i sees keys j <= i), so there the rule tiles as if S were
# T: one T x T tile, the key tiles past it skipped. Against the T x S tile and the larger rule's T x 512 (same
# script, --masks=causal --tiles=1x1,64x64,200x200,64x128,128x128,1x512,64x512,4096x4096):
#
#   (B, T, N, K, S), causal        fwd+bwd: T x T   128-wide  T x 512  T x S       fwd: T x T   T x 512  T x S
#   1, 1, 8, 8, 4096                        1.00    3.25      4.06     4.35             1.00    4.61     2.17
#   2, 64, 8, 8, 4096                       1.00    1.09      1.52     7.14             1.04    1.29     1.59
#   1, 200, 4, 4, 2048                      1.00    1.56      2.71     6.68             1.04    1.45     2.40
#
# (dense, which computes every T x S logit, was 1.8-11.6x slower there.)
#
# Past that size the tiles of one step over the batch and heads, [B, N, bq, bk], are what counts: the backward's steps
# hold several such arrays (probabilities, dP, dS), the forward's fewer. Causal forward+backward without GQA,
# side by side (same script, --masks=causal --tiles=64x128,128x128,128x256,256x256,256x512, time over the fastest
# path, two runs where two numbers are given; dense was 2.1x or slower in every row; * = the rule's tile):
#
#   (B, T = S, N, K)   B·N   64x128        128x128       128x256       256x256       256x512
#   8, 256, 8, 8       64    1.00*         1.14          2.19          1.32          -
#   4, 512, 8, 8       32    1.00 / 1.09*  1.01 / 1.00   1.29 / 1.35   1.25 / 1.46   2.06 / 2.12
#   2, 512, 8, 8       16    1.35          1.00*         1.25          1.30          2.25
#   4, 1024, 8, 8      32    1.19 / 1.13   1.00 / 1.00*  1.27 / 1.13   1.46 / 1.31   1.14 / 1.10
#   2, 1024, 8, 8      16    1.09 / 1.13   1.03 / 1.00*  1.15 / 1.50   1.11 / 1.32   1.00 / 1.23
#   2, 1024, 4, 4      8     1.30          1.17          1.23          1.13          1.00*
#   1, 1024, 8, 8      8     1.34          1.20          1.26          1.27          1.00*
#   1, 1024, 4, 4      4     1.44 / 1.47   1.41 / 1.41   1.43 / 1.48   1.28 / 1.32   1.00 / 1.00*
#   1, 1024, 2, 2      2     1.25          1.18          1.51          1.37          1.00*
#   4, 2048, 8, 8      32    1.27          1.25          1.41          1.35          1.00*
#   2, 2048, 8, 8      16    1.27          1.18          1.32          1.39          1.00*
#   1, 2048, 8, 8      8     1.51          1.41          1.28          1.39          1.00*
#   2, 2048, 4, 4      8     1.63          1.36          1.34          1.30          1.00*
#   1, 2048, 4, 4      4     1.70          1.59          1.66          1.45          1.00*
#
# The intermediate tiles 128x256 and 256x256 were never the fastest (1.11 at best), and where the large tile lost,
# it lost to 128x128 or 64x128. What fits every row is a cap on one step's tiles over the batch and heads,
# B·N·bq·bk, at the logits of one head, T·S: the first of 256x512 (from S = LARGE_BLOCKS_MIN_KV_LEN) and 128x128
# that holds it, else 64x128. It is a fit to these measurements, not a model of the caches. Checked on shapes left
# out of the fit (same script, one run):
#
#   (B, T = S, N, K)   B·N   64x128   128x128  128x256  256x256  256x512
#   16, 512, 8, 8      128   1.04*    1.00     1.18     1.20     1.73
#   3, 1024, 8, 8      24    1.08     1.00*    1.16     1.13     1.01
#   8, 1024, 8, 8      64    1.04     1.00*    1.17     1.24     1.04
#   1, 1536, 8, 8      8     1.58     1.39     1.34     1.33     1.00*
#   2, 2048, 16, 16    32    1.15     1.05     1.17     1.16     1.00*
#   8, 2048, 8, 8      64    1.23     1.13*    1.43     1.34     1.00
#
# so at T = 2048 the large tile still won past the cap, where that rule's 128x128 took 1.13. Both passes, remeasured
# (same script, --tiles=64x128,128x128,256x512, one run; forward+backward / forward alone; * = the rule's tile now):
#
#   (B, T = S, N, K)   B·N   64x128         128x128        256x512
#   16, 512, 8, 8      128   1.00* / 1.05   1.05  / 1.00*  1.60  / 1.22
#   4, 512, 8, 8       32    1.02* / 1.03   1.00  / 1.00*  2.33  / 2.32
#   2, 512, 8, 8       16    1.07  / 1.15   1.00* / 1.00*  2.10  / 1.54
#   8, 1024, 8, 8      64    1.00  / 1.01   1.21* / 1.00*  1.09  / 1.08
#   4, 1024, 8, 8      32    1.00  / 1.08   1.06* / 1.00*  1.04  / 1.09
#   2, 1024, 8, 8      16    1.11  / 1.00   1.00* / 1.01*  1.10  / 1.07
#   1, 1024, 8, 8      8     1.44  / 1.54   1.25  / 1.32   1.00* / 1.00*
#   1, 1024, 4, 4      4     1.37  / 1.00   1.34  / 1.02   1.00* / 1.14*
#   8, 2048, 8, 8      64    1.43  / 1.15   1.48  / 1.14   1.00* / 1.00*
#   4, 2048, 8, 8      32    1.13  / 1.38   1.11  / 1.12   1.00* / 1.00*
#   2, 2048, 8, 8      16    1.30  / 1.55   1.24  / 1.42   1.00* / 1.00*
#   1, 2048, 8, 8      8     1.56  / 1.77   1.41  / 1.58   1.00* / 1.00*
#
# and on shapes left out of both fits (one run):
#
#   16, 2048, 8, 8     128   1.26  / 1.27   1.17  / 1.32   1.00* / 1.00*
#   3, 2048, 8, 8      24    1.26  / 1.19   1.18  / 1.02   1.00* / 1.00*
#   1, 4096, 8, 8      8     1.74  / 1.83   1.53  / 1.58   1.00* / 1.00*
#   6, 1024, 8, 8      48    1.06  / 1.09   1.00* / 1.00*  1.11  / 1.04
#   2, 1536, 8, 8      16    1.15  / 1.26   1.00  / 1.10   1.01* / 1.00*
#   4, 1536, 8, 8      32    1.06  / 1.02   1.14* / 1.00*  1.00  / 1.26
#
# From S = STEP_CAP_MAX_KV_LEN = 2048 the large tile won in both passes at every B·N measured (up to 128), so the
# step cap applies below that length only. Below it the forward alone wanted the tiles forward+backward wanted,
# except past the cap, where it kept 128x128 and the backward wanted 64x128; so the forward's fallback is BLOCKS.
# Misses left: 4x1536x8x8 forward+backward at 1.14 (the large tile won) and 1x1024x4x4 forward alone at 1.14
# (64x128 won; forward+backward wanted the large tile by 1.34). (An earlier backward
# copied every dS and P tile into another layout, and an earlier rule, fitted to it, halved 256x512 through
# 256x256 and 128x256 with a cap of a quarter of T·S; with the backward of ``blockwise.py``, which accumulates dK
# and dV transposed, that rule's tile took 1.13-1.41 in six of the rows above.) With GQA, though, neither a step
# cap nor BLOCKS below S = LARGE_BLOCKS_MIN_KV_LEN helped: starting from LARGE_BLOCKS, the group's tile cap alone
# picked the fastest tile in every row (same script, fwd+bwd, with the earlier backward; the tile a step cap of
# a quarter of T·S with a floor of 2**18 would pick):
#
#   (B, T = S, N, K), causal   64x128   128x128  128x256  256x256     with them         tile cap alone (the rule)
#   4, 256, 8, 1               1.44     1.00     3.12     1.19        64x128            128x128
#   2, 512, 8, 1               1.44     1.00     1.26     1.40        128x128           128x128
#   4, 512, 8, 2               1.42     1.39     1.00     1.22        64x128            128x256
#   2, 1024, 8, 2              1.50     1.25     1.00     1.13        128x128           128x256
#   4, 512, 8, 2               1.24     1.20     1.00     1.42        64x128            128x256
#   2, 512, 8, 2               1.52     1.21     1.00     1.19        128x128           128x256
#   2, 768, 8, 2               1.46     1.16     1.00     1.11        128x128           128x256
#   2, 512, 4, 2               1.38     1.31     1.31     1.00        128x128           256x256
#   4, 512, 4, 2               1.21     1.14     1.47     1.00        128x128           256x256
#
# (the forward alone agreed in each of these rows). So for causal attention without GQA below
# S = STEP_CAP_MAX_KV_LEN, ``blockwise_blocks`` takes the first of LARGE_BLOCKS (from S = LARGE_BLOCKS_MIN_KV_LEN)
# and BLOCKS with B·N·bq·bk <= T·S, else MIN_BLOCKS under differentiation and BLOCKS alone; where the two differ
# the choice carries the forward's own tiles in ``Choice.forward``: undifferentiated calls run those
# (``split_forward``), and under differentiation the backward's tiles run forward and backward. From
# S = STEP_CAP_MAX_KV_LEN, and with GQA, causal or not, it starts from LARGE_BLOCKS and only the group's tile cap
# halves it.
#
# Those were causal. Without a causal mask (or window) no tile is skipped and none is half masked, and the largest
# tiles won whatever B·N (same script, --masks=none, two runs, time over the fastest of 64x128, 128x128, 128x256,
# 256x256, 256x512 and the old rule's tile):
#
#   (B, T, N, K)        fwd+bwd: old rule's tile          256x512        fwd: old rule's tile          256x512
#   4, 512, 8, 8                 128x128  1.27 / 1.05     1.00 / 1.07         128x128  1.37 / 1.38     1.00 / 1.00
#   2, 1024, 8, 8                128x256  1.48 / 1.17     1.00 / 1.06
#   1, 2048, 8, 8                256x256  1.18 / 1.27     1.00 / 1.00
#   2, 4096, 8, 8                128x256  -    / 1.29     -    / 1.00
#
# So without a causal mask or window ``blockwise_blocks`` starts from LARGE_BLOCKS at any S and only the GQA cap
# TILE_MAX_ELEMENTS halves it (at G = 4, 128x256 was again the fastest tile, in both passes); BLOCKS below
# LARGE_BLOCKS_MIN_KV_LEN and the step cap are for causal attention without GQA.
BLOCKWISE_MIN_KV_LEN = 256
SINGLE_TILE_MAX_LOGITS = 2**20
SMALL_SINGLE_TILE_MAX_LOGITS = 2**19
BLOCKS = (128, 128)
LARGE_BLOCKS = (256, 512)
LARGE_BLOCKS_MIN_KV_LEN = 1024
STEP_CAP_MAX_KV_LEN = 2048
TILE_MAX_ELEMENTS = 2**17
MIN_BLOCKS = (64, 128)
# On GPU, cuDNN's fused kernel (jax.nn, implementation="cudnn") takes these input dtypes and head dims.
CUDNN_DTYPES = ("float16", "bfloat16")
CUDNN_MAX_HEAD_DIM = 128


def _cudnn_unsupported(opts: LogitOptions, *, return_weights: bool) -> str | None:
  """Why jax.nn's cuDNN kernel cannot compute these options (None when it can)."""
  if (opts.rule.has_prepare or not logits_lib.is_unit_scale(opts.weight_scale) or opts.logit_soft_cap is not None
      or opts.logit_clamp is not None or not opts.float32_softmax or not opts.subtract_max or return_weights):
    return ("implementation='cudnn' supports only plain scale rules without prepare, weight scale, soft cap, "
            "clamp, return_weights or the failure-demonstration switches")
  return None


def select_implementation(query_shape: tuple[int, ...], key_shape: tuple[int, ...], opts: LogitOptions, *,
                          dtype: Any = jnp.float32, return_weights: bool = False, has_bias: bool = False,
                          is_causal: bool = False, has_local_window: bool = False,
                          backend: str | None = None) -> Choice:
  """The exact implementation ``dot_product_attention(implementation=None)`` runs, by the measured rule above.

  Args:
    query_shape: [B, T, N, H] (or [T, N, H]).
    key_shape: [B, S, K, H] (or [S, K, H]).
    opts: the resolved logit options (``resolve_logit_options``).
    dtype: the input dtype.
    return_weights: whether the weights are requested (dense only).
    has_bias: whether a bias is given (cuDNN is not chosen automatically then).
    is_causal: whether the attention is causal (blockwise then skips tiles).
    has_local_window: whether a local window is given (likewise; and cuDNN is not chosen automatically).
    backend: "cpu", "gpu" or "tpu"; None = ``jax.default_backend()``.

  Returns:
    A ``Choice``: "dense", "blockwise" (with its blocks) or "cudnn", and the reason.
  """
  backend = jax.default_backend() if backend is None else backend
  t, s, n, h = query_shape[-3], key_shape[-3], query_shape[-2], query_shape[-1]
  b = query_shape[0] if len(query_shape) == 4 else 1
  if (backend == "gpu" and jnp.dtype(dtype).name in CUDNN_DTYPES and h <= CUDNN_MAX_HEAD_DIM and h % 8 == 0
      and not has_bias and not has_local_window and _cudnn_unsupported(opts, return_weights=return_weights) is None):
    return Choice("cudnn", reason="GPU, half precision, plain scale: cuDNN's fused kernel")
  reason = blockwise_lib.blockwise_unsupported(opts, return_weights=return_weights)
  if reason is not None:
    return Choice("dense", reason=reason)
  if t < 1:
    return Choice("dense", reason="T = 0")
  kv_len, seen = s, ""
  if is_causal and t < s:  # query i sees keys j <= i only: tiles as if S were T (the key tiles past T are skipped)
    s, key_shape, seen = t, (*key_shape[:-3], t, *key_shape[-2:]), f" (causal: only the first T = {t} keys count)"
  if kv_len < BLOCKWISE_MIN_KV_LEN:
    if b * n * t * s <= SMALL_SINGLE_TILE_MAX_LOGITS:
      return Choice("blockwise", t, s, reason=f"S = {kv_len} < {BLOCKWISE_MIN_KV_LEN} and B·N·T·S = {b * n * t * s} "
                                              f"<= {SMALL_SINGLE_TILE_MAX_LOGITS}: one tile under differentiation{seen}",
                    forward=Choice("dense", reason=f"undifferentiated, S < {BLOCKWISE_MIN_KV_LEN}"))
    return Choice("dense", reason=f"S = {kv_len} < {BLOCKWISE_MIN_KV_LEN}: few tiles, dense is as fast")
  if b * n * t * s <= SINGLE_TILE_MAX_LOGITS:
    return Choice("blockwise", t, s, reason=f"B·N·T·S = {b * n * t * s} <= {SINGLE_TILE_MAX_LOGITS}: one tile{seen}")
  skips = is_causal or has_local_window
  blocks = blockwise_blocks(query_shape, key_shape, is_causal=skips)
  forward = blockwise_blocks(query_shape, key_shape, is_causal=skips, differentiated=False)
  return Choice("blockwise", *blocks, reason=f"S = {kv_len} >= {BLOCKWISE_MIN_KV_LEN}{seen}",
                forward=None if forward == blocks else Choice("blockwise", *forward, reason="undifferentiated"))


def split_forward(forward_fn: Any, differentiable_fn: Any, query: Array, key: Array, value: Array) -> Array:
  """``forward_fn(q, k, v)`` when not differentiated; ``differentiable_fn``'s value and gradients under differentiation.

  A ``jax.custom_vjp``: its undifferentiated evaluation is ``forward_fn`` (the path fastest forward alone: other
  tiles, or dense); its forward under ``jax.grad``/``jax.vjp`` is ``differentiable_fn``'s (blockwise, which saves
  what its backward needs), and so is its backward. The two agree up to float rounding. Forward-mode
  differentiation (``jax.jvp``) is not supported, as for blockwise itself.

  Args:
    forward_fn: attention of (q, k, v) by the path run alone, every other argument bound.
    differentiable_fn: the same attention by the path run under differentiation.
    query: [B, T, N, H].
    key: [B, S, K, H].
    value: [B, S, K, H].

  Returns:
    The attention output [B, T, N, H].
  """
  @jax.custom_vjp
  def attend(q, k, v):
    return forward_fn(q, k, v)

  def attend_fwd(q, k, v):
    return jax.vjp(differentiable_fn, q, k, v)  # (output, its backward with its residuals)

  attend.defvjp(attend_fwd, lambda vjp, cotangent: vjp(cotangent))
  return attend(query, key, value)


def blockwise_blocks(query_shape: tuple[int, ...], key_shape: tuple[int, ...], *, is_causal: bool,
                     differentiated: bool = True) -> tuple[int, int]:
  """(block_q, block_k) of the measured rule above, capped at T and S.

  Args:
    query_shape: [B, T, N, H] (or [T, N, H]).
    key_shape: [B, S, K, H] (or [S, K, H]).
    is_causal: whether a causal mask (or a local window) skips tiles.
    differentiated: the tiles for forward+backward (True) or for the forward pass alone.

  Returns:
    Causal without GQA and S below STEP_CAP_MAX_KV_LEN: the first of LARGE_BLOCKS (from
    S = LARGE_BLOCKS_MIN_KV_LEN) and BLOCKS whose B·N·bq·bk (capped at T and S), one step's tiles over the batch
    and heads, is at most T·S, the logits of one head; else MIN_BLOCKS under differentiation and BLOCKS for the
    forward pass alone. Otherwise LARGE_BLOCKS, halved (block_k to 256, block_q to 128, block_k to
    MIN_BLOCKS[1], block_q to MIN_BLOCKS[0]) until G·bq·bk, the tile of one key/value head with its GQA group
    G = N/K folded into the query rows, holds at most TILE_MAX_ELEMENTS.
  """
  q_len, kv_len = query_shape[-3], key_shape[-3]
  rows = max(1, query_shape[-2] // key_shape[-2])  # the GQA group G
  ungrouped_causal = is_causal and rows == 1  # with GQA the group's tile cap alone sizes the tiles, as unmasked
  start = BLOCKS if ungrouped_causal and kv_len < LARGE_BLOCKS_MIN_KV_LEN else LARGE_BLOCKS
  if ungrouped_causal and kv_len < STEP_CAP_MAX_KV_LEN:  # the step cap; G = 1, so every candidate holds the tile cap
    batch_heads = query_shape[-2] * (query_shape[0] if len(query_shape) == 4 else 1)  # B·N
    step = lambda tile: batch_heads * min(tile[0], q_len) * min(tile[1], kv_len)
    fits = [tile for tile in (start, BLOCKS) if step(tile) <= q_len * kv_len]
    block_q, block_k = fits[0] if fits else (MIN_BLOCKS if differentiated else BLOCKS)
  else:
    block_q, block_k = start
    for axis, floor in ((1, 256), (0, 128), (1, MIN_BLOCKS[1]), (0, MIN_BLOCKS[0])):
      while rows * block_q * block_k > TILE_MAX_ELEMENTS and (block_q, block_k)[axis] > floor:
        block_q, block_k = (block_q // 2, block_k) if axis == 0 else (block_q, block_k // 2)
  return min(block_q, q_len), min(block_k, kv_len)


def fixed_tiles(choice: Choice) -> list[tuple[int, int]]:
  """The (block_q, block_k) tiles a fixed-rule choice runs: its own and its forward's (none for dense)."""
  paths = (choice, choice.forward) if choice.forward is not None else (choice,)
  return [(c.block_q, c.block_k) for c in paths if c.implementation == "blockwise"]


def auto_choice(query_shape: Sequence[int], key_shape: Sequence[int], dtype: Any, opts: LogitOptions, *,
                is_causal: bool, local_window_size: int | tuple[int, int] | None, has_bias: bool, has_mask: bool,
                has_lengths: bool, return_weights: bool) -> Choice:
  """What ``dot_product_attention(implementation="auto")`` runs: the cached choice, else a fresh tuning's.

  On a miss ``autotune.tune_attention`` measures the case now (dense, blockwise at ``autotune.TILE_CANDIDATES``
  and at the fixed rule's tiles, forward+backward and forward alone) and stores the fastest. The fixed rule
  (``select_implementation``) decides without measuring where there is nothing to tune: options blockwise lacks,
  S below ``BLOCKWISE_MIN_KV_LEN``, a bias, mask or lengths (not measured), or the cuDNN kernel. A cache entry
  that is malformed or whose tile does not fit T and S is warned about and the fixed rule used.

  Args:
    query_shape: [B, T, N, H] (or [T, N, H]).
    key_shape: [B, S, K, H] (or [S, K, H]).
    dtype: the input dtype.
    opts: the resolved logit options.
    is_causal: causal masking.
    local_window_size: the local window, or None.
    has_bias: a bias is given.
    has_mask: a mask is given.
    has_lengths: query or key/value sequence lengths are given.
    return_weights: the weights are requested.

  Returns:
    The ``Choice`` to run.
  """
  fixed = select_implementation(
      query_shape, key_shape, opts, dtype=dtype, return_weights=return_weights, has_bias=has_bias,
      is_causal=is_causal, has_local_window=local_window_size is not None)
  if (fixed.implementation == "cudnn" or has_bias or has_mask or has_lengths
      or blockwise_lib.blockwise_unsupported(opts, return_weights=return_weights) is not None
      or key_shape[-3] < BLOCKWISE_MIN_KV_LEN):
    return fixed
  key = autotune.cache_key(query_shape, key_shape, dtype, opts, is_causal=is_causal,
                           local_window_size=local_window_size)
  entry = autotune.load().get(key)
  if entry is None:
    return autotune.tune_attention(query_shape, key_shape, dtype, is_causal=is_causal, opts=opts,
                                   local_window_size=local_window_size, fixed_blocks=fixed_tiles(fixed)).choice
  choice = autotune.entry_choice(entry, query_shape, key_shape)
  if choice is None:
    warnings.warn(f"the attention autotune entry {key} in {autotune.cache_path()} is malformed or its tile does not "
                  f"fit T = {query_shape[-3]}, S = {key_shape[-3]} ({entry.get('choice')!r}); using the fixed rule")
    return fixed
  return choice


def dot_product_attention(query: Array, key: Array, value: Array, bias: Array | None = None,
                          mask: Array | None = None, *, scale: float | None = None,
                          rule: str | rules_lib.ScaleRule | None = None, is_causal: bool = False,
                          query_seq_lengths: Array | None = None, key_value_seq_lengths: Array | None = None,
                          local_window_size: int | tuple[int, int] | None = None,
                          logit_soft_cap: float | None = None, logit_clamp: float | None = None,
                          float32_softmax: bool = True, subtract_max: bool = True, implementation: str | None = None,
                          return_residual: bool = False, return_weights: bool = False) -> Array | tuple[Array, ...]:
  """Scaled dot-product attention, softmax(s·QKᵀ + bias)·V, with pluggable logit-scale rules.

  A drop-in for ``jax.nn.dot_product_attention`` (same layout and argument
  names); Vaswani et al. 2017, §3.2.1. B batch, T query length, S key length,
  N query heads, K key/value heads (N a multiple of K: GQA), H head dim.

  Args:
    query: [B, T, N, H] or [T, N, H].
    key: [B, S, K, H] or [S, K, H].
    value: same shape as key.
    bias: added to the logits after scaling; broadcastable to [B, N, T, S].
    mask: boolean, True = attend; broadcastable to [B, N, T, S].
    scale: a number s; the default (with ``rule=None``) is 1/√H as in jax.nn.
    rule: a logit-scale rule name (see ``scaling.available_rules()``) or a
      ``ScaleRule``; an alternative to ``scale``.
    is_causal: query i attends keys j <= i.
    query_seq_lengths: int [B]; queries at or past the length output 0.
    key_value_seq_lengths: int [B]; keys at or past the length are masked.
    local_window_size: (left, right) window, or one int for both.
    logit_soft_cap: c > 0 replaces logits z by c·tanh(z/c) (Gemma 2).
    logit_clamp: c > 0 clips logits to [-c, c].
    float32_softmax: compute logits and softmax in float32 whatever the input
      dtype (default). False computes them in the input dtype: only to
      demonstrate low-precision failures.
    subtract_max: subtract the row maximum before exp (default). False exists
      only to demonstrate overflow.
    implementation: None picks the fastest exact path from the shapes,
      options and backend (``select_implementation``; the measured rule is
      written next to it): blockwise for S >= ``BLOCKWISE_MIN_KV_LEN`` when
      it supports the options (one T x S tile while B·N·T·S <=
      ``SINGLE_TILE_MAX_LOGITS``); below it one T x S tile under
      differentiation and dense alone while B·N·T·S <=
      ``SMALL_SINGLE_TILE_MAX_LOGITS``; dense otherwise; cuDNN on GPU in half
      precision with a plain scale. Where the forward pass alone is faster
      with other tiles (``Choice.forward``), a call that is not
      differentiated runs those (``split_forward``; no bias, mask, lengths
      or residual), so its output then differs from the differentiated
      call's in float rounding only. ``"dense"`` (alias ``"xla"``) forces the
      dense code; ``"blockwise"`` forces ``scaling.blockwise`` (default
      blocks); ``"pallas"`` the Pallas flash-attention kernel
      (``scaling.pallas_attention``; rules "prepare, then a plain scale",
      optionally causal, no bias, mask, lengths, window, cap or clamp);
      ``"cudnn"`` dispatches to
      ``jax.nn.dot_product_attention(implementation="cudnn")`` on GPU when the
      options allow it (a plain scale, no cap, clamp or weight scale) and
      raises otherwise. Forced implementations raise on options they lack.
      ``"auto"`` (opt-in) runs the path measured fastest for this case: the
      first call of a case (shapes, dtype, backend, masking, logit options)
      times dense and blockwise at several tiles, forward+backward, and
      remembers the fastest on disk (``scaling.autotune``; also under jit,
      where it measures at trace time); cases with nothing to tune (a bias,
      mask or lengths, options blockwise lacks, S below
      ``BLOCKWISE_MIN_KV_LEN``) and unusable cache entries use the fixed rule.
      Unlike None, its choice can differ between machines and runs.
    return_residual: also return the log-sum-exp of the masked logits [B, T, N]
      (as jax.nn; -inf for fully masked rows).
    return_weights: also return the attention weights [B, N, T, S].

  Returns:
    Output [B, T, N, H] (fully masked query rows give 0), followed by the
    residual and/or weights when requested.
  """
  query, key, value, batched = logits_lib.check_qkv(query, key, value)
  logits_lib.check_attention_args(query.shape, key.shape, bias, mask, batched=batched, is_causal=is_causal,
                                  query_seq_lengths=query_seq_lengths, key_value_seq_lengths=key_value_seq_lengths,
                                  local_window_size=local_window_size)
  logits_lib.check_flags(return_residual=return_residual, return_weights=return_weights)
  opts = logits_lib.resolve_logit_options(query.shape[-1], scale=scale, rule=rule, logit_soft_cap=logit_soft_cap,
                                          logit_clamp=logit_clamp, float32_softmax=float32_softmax,
                                          subtract_max=subtract_max)
  if implementation is not None and implementation not in (*IMPLEMENTATIONS, AUTO):
    raise ConfigError(f"implementation must be None or one of {', '.join((*IMPLEMENTATIONS, AUTO))}, got "
                      f"{implementation!r}")
  blocks, choice = {}, None
  if implementation == AUTO:
    choice = auto_choice(
        query.shape, key.shape, query.dtype, opts, is_causal=is_causal, local_window_size=local_window_size,
        has_bias=bias is not None, has_mask=mask is not None, return_weights=return_weights,
        has_lengths=query_seq_lengths is not None or key_value_seq_lengths is not None)
  elif implementation is None:
    choice = select_implementation(query.shape, key.shape, opts, dtype=query.dtype, return_weights=return_weights,
                                   has_bias=bias is not None, is_causal=is_causal,
                                   has_local_window=local_window_size is not None)
  if implementation in (None, AUTO):
    implementation = choice.implementation
    blocks = {k: v for k, v in (("block_q", choice.block_q), ("block_k", choice.block_k)) if v is not None}
  mask_kwargs = dict(is_causal=is_causal, query_seq_lengths=query_seq_lengths,
                     key_value_seq_lengths=key_value_seq_lengths, local_window_size=local_window_size)
  # The choice's own forward path runs when not differentiated, where nothing else rides on the call: no bias,
  # mask, lengths or residual, and logit options that are plain Python values (a traced scale or rule parameter
  # could be what is differentiated). Below S = BLOCKWISE_MIN_KV_LEN, where the rule's forward is dense, a call that
  # cannot split runs dense (a tuned choice at longer S keeps its blockwise tiles).
  plain = (bias is None and mask is None and query_seq_lengths is None and key_value_seq_lengths is None
           and not return_residual and (rule is None or isinstance(rule, str))
           and all(x is None or isinstance(x, (int, float)) for x in (scale, logit_soft_cap, logit_clamp)))
  split = choice is not None and choice.forward is not None and implementation == "blockwise"
  if split and not plain and key.shape[-3] < BLOCKWISE_MIN_KV_LEN and choice.forward.implementation == "dense":
    implementation, split = "dense", False
  if implementation == "cudnn":
    out = _cudnn(query, key, value, bias, mask, opts, return_residual=return_residual, return_weights=return_weights,
                 **mask_kwargs)
  elif implementation == "pallas":
    out = _pallas(query, key, value, bias, mask, opts, return_residual=return_residual, return_weights=return_weights,
                  **mask_kwargs)
  else:
    if implementation == "blockwise":
      if return_weights:
        raise ConfigError("implementation='blockwise' does not return weights")
      blockwise_lib.check_softmax(float32_softmax, subtract_max)
      if split and plain:  # the inputs and options are checked above: the paths trust them
        out = split_forward(autotune.unchecked_path_function(choice.forward, opts, **mask_kwargs),
                            autotune.unchecked_path_function(choice, opts, **mask_kwargs), query, key, value)
      else:
        out = blockwise_lib.blockwise_attention_unchecked(query, key, value, bias, mask, opts,
                                                          return_residual=return_residual, **mask_kwargs, **blocks)
    else:
      out = dense_lib.dense_attention_unchecked(query, key, value, bias, mask, opts, return_residual=return_residual,
                                                return_weights=return_weights, **mask_kwargs)
  return out if batched else jax.tree.map(lambda x: x[0], out)


def _pallas(query, key, value, bias, mask, opts: LogitOptions, *, is_causal, return_residual, return_weights,
            **mask_kwargs):
  """The Pallas kernel (its default blocks) on batched inputs, where it covers the options."""
  if return_weights:
    raise ConfigError("implementation='pallas' does not return weights")
  reason = pallas_lib.supports(opts, bias=bias, mask=mask, **mask_kwargs)
  if reason is not None:
    raise ConfigError(f"implementation='pallas' does not support {reason}")
  return pallas_lib.pallas_attention_unchecked(query, key, value, opts, is_causal=is_causal,
                                               return_residual=return_residual)


def _cudnn(query, key, value, bias, mask, opts: LogitOptions, *, return_weights, **kwargs):
  """Dispatch to jax.nn's cuDNN flash attention where our options allow it."""
  reason = _cudnn_unsupported(opts, return_weights=return_weights)
  if reason is not None:
    raise ConfigError(reason)
  if jax.default_backend() != "gpu":
    raise ConfigError(f"implementation='cudnn' needs a GPU; the default backend is {jax.default_backend()!r}")
  return jax.nn.dot_product_attention(query, key, value, bias, mask, scale=opts.scale, implementation="cudnn",
                                      **kwargs)
