"""Privacy accounting in pure Python: Rényi DP and exact composition of k-RR.

Laid out as google's ``dp-accounting`` is, and cross-checked against it in the
tests (that package is compiled and stays out of the Pyodide core):

==============================  ===========================================================
``dp_event``                    frozen events: :class:`GaussianEvent`, :class:`KRREvent`,
                                :class:`PureDpEvent`, :class:`SampledGaussianEvent` (saved form)
``privacy_accountant``          the interface :class:`Accountant`; :class:`BasicAccountant`
``rdp.conversions``             RDP of the Gaussian and of k-RR; :func:`rdp_to_dp` (Balle
                                et al. 2020, Prop. 12 of arXiv:2004.00010) over a grid of
                                orders -- what the companion's decoding receipts use
``rdp.rdp_privacy_accountant``  :class:`RdpAccountant`
``rdp.individual_filter``       the individual Rényi filter (:class:`IndividualRdpFilter`)
``pld.krr_pld``                 the tight ``(eps, delta)`` of ``n``-fold k-RR from its exact
                                privacy-loss distribution (:func:`krr_composed_epsilon`)
``pld.composition``             several k-RR groups (scripts, sites at other epsilons)
``pld.pld_privacy_accountant``  :class:`KrrPldAccountant`
``ledger``                      :class:`Ledger`: many events with labels (site, document),
                                saved with :meth:`Ledger.to_dict` and restored
==============================  ===========================================================

Every receipt in Veil -- k-RR prompts, decoding answers, RootGuard draws -- asks
one of these accountants.  The former O(n sqrt(n)) k-RR computation, the tests'
oracle, lives in ``tests/py_core/krr_pld_oracle.py``.  Everything is importable
from here (``from py_core.accounting import KRREvent``).
"""

from __future__ import annotations

from py_core.accounting.common import DEFAULT_DELTA, DEFAULT_ORDERS
from py_core.accounting.dp_event import (
    Event,
    GaussianEvent,
    KRREvent,
    PureDpEvent,
    SampledGaussianEvent,
    event_from_dict,
    event_to_dict,
)
from py_core.accounting.ledger import ACCOUNTANTS, Ledger, LedgerEntry
from py_core.accounting.pld.krr_pld import krr_composed_delta, krr_composed_epsilon
from py_core.accounting.pld.pld_privacy_accountant import KrrPldAccountant
from py_core.accounting.privacy_accountant import Accountant, BasicAccountant
from py_core.accounting.rdp.conversions import (
    gaussian_rdp,
    gaussian_rdp_epsilon,
    krr_rdp,
    krr_rdp_epsilon,
    rdp_to_dp,
)
from py_core.accounting.rdp.individual_filter import IndividualRdpFilter, filter_order, rdp_budget
from py_core.accounting.rdp.rdp_privacy_accountant import RdpAccountant
from py_core.errors import InvalidParameterError, StateError

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_DELTA",
    "DEFAULT_ORDERS",
    "Accountant",
    "BasicAccountant",
    "Event",
    "GaussianEvent",
    "IndividualRdpFilter",
    "InvalidParameterError",
    "KRREvent",
    "KrrPldAccountant",
    "Ledger",
    "LedgerEntry",
    "PureDpEvent",
    "RdpAccountant",
    "SampledGaussianEvent",
    "StateError",
    "event_from_dict",
    "event_to_dict",
    "filter_order",
    "gaussian_rdp",
    "gaussian_rdp_epsilon",
    "krr_composed_delta",
    "krr_composed_epsilon",
    "krr_rdp",
    "krr_rdp_epsilon",
    "rdp_budget",
    "rdp_to_dp",
]
