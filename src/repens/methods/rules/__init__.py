"""The update rules, one module each. A module declares its rule to the registry in a
literal (``REGISTRY_ENTRY``, read by :mod:`repens.core.registry` without importing it) and
builds it (``build``; ``build_function_space`` for a rule with a function-space form): an
object of :class:`repens.methods.rule.Rule` with ``init`` and ``update``.

=========================  ===========================  ==============================
module                     rule (config ``rule``)       equation
=========================  ===========================  ==============================
:mod:`.ensemble`           deep ensemble                Eq. 2
:mod:`.svgd`               SVGD, f-SVGD                 Eq. 6, Eq. 7
:mod:`.wgd`                WGD, f-WGD                   Eq. 13 (KDE Eq. 15, SGE Eq. 16,
                                                        SSGE Eq. 17), Eq. 5 with Eq. 20
:mod:`.anchored`           anchored ensemble            Pearce et al. (2020), Eq. 11
:mod:`.langevin`           DLE, DRLE                    Wild et al. (2023)
=========================  ===========================  ==============================
"""
