class Pump:
    def __init__(self):
        self.flow = 0


def run(p):
    return p.flow
