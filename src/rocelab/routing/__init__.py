"""Routing on the emulated switches: FRR's BGP, configured from config_db as SONiC does.

    bgp.read_bgp(doc, source)   config_db's BGP tables → BgpConfig (what is rendered, warned, ignored)
    eos.read_eos_bgp(text, …)   an EOS running-config's `router bgp` → BgpConfig (for the static checks)
    nvue.read_nvue_bgp(text, …) a Cumulus NVUE file's `router bgp` → BgpConfig (for the static checks)
    frr.render_bgpd(config)     BgpConfig → bgpd.conf, as sonic-bgpcfgd renders docker-fpm-frr's templates
    design.generated(fabric)    the usual leaf-spine eBGP design, for switches whose profile has none

switchd keeps forwarding on the kernel FIB (rocelab.switch.kernel_fib): whatever FRR's zebra
installs is what the emulated ASIC forwards on.
"""
