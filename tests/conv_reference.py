"""A float64 NumPy reference for conv2d forward and backward, independent of torch.

Cross-correlation with zero padding and stride, NCHW: the definitions the strategies must match.
"""

from __future__ import annotations

import numpy as np


def _pad(x, ph, pw):
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))


def forward(x, w, stride=(1, 1), padding=(0, 0)):
    """y[n,k,p,q] = sum_{c,r,s} xpad[n,c,p*sh+r,q*sw+s] * w[k,c,r,s], in float64."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    sh, sw = stride
    ph, pw = padding
    xp = _pad(x, ph, pw)
    n, c, hp, wp = xp.shape
    k, _, r, s = w.shape
    p, q = (hp - r) // sh + 1, (wp - s) // sw + 1
    y = np.zeros((n, k, p, q))
    for i in range(r):
        for j in range(s):
            patch = xp[:, :, i:i + sh * (p - 1) + 1:sh, j:j + sw * (q - 1) + 1:sw]  # (n,c,p,q)
            y += np.einsum("ncpq,kc->nkpq", patch, w[:, :, i, j])
    return y


def backward(x, w, dy, stride=(1, 1), padding=(0, 0)):
    """(dx, dw) of sum(y * dy), in float64."""
    x, w, dy = (np.asarray(a, np.float64) for a in (x, w, dy))
    sh, sw = stride
    ph, pw = padding
    xp = _pad(x, ph, pw)
    n, c, hp, wp = xp.shape
    k, _, r, s = w.shape
    p, q = dy.shape[2], dy.shape[3]
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for i in range(r):
        for j in range(s):
            rows = slice(i, i + sh * (p - 1) + 1, sh)
            cols = slice(j, j + sw * (q - 1) + 1, sw)
            dw[:, :, i, j] = np.einsum("ncpq,nkpq->kc", xp[:, :, rows, cols], dy)
            dxp[:, :, rows, cols] += np.einsum("nkpq,kc->ncpq", dy, w[:, :, i, j])
    dx = dxp[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]]
    return dx, dw
