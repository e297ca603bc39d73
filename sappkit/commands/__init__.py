"""Sub-commands of the ``sappkit`` command line, one module each (see ``sappkit.cli``)."""
