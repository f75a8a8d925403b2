"""calibrate: time real kernels and collectives into a simcluster hardware profile.

Run on the machine to describe (``torchrun ... -m calibrate --out PROFILE.yaml``); the
simulator reads the YAML and never imports torch. torch is imported only inside the modules
that measure (``gemm``, ``attention``, ``membw``, ``collectives``, ``timers``, ``dist``,
``kineto`` trace production in tests); the importers and the nccl-tests formulas are pure Python.
"""
