"""Running graphs durably: graphtape's checkpoint saver, and later locks, recovery, retention."""
