# placeholder until the ring test lands
