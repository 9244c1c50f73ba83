"""The frame every server-drawn SVG chart shares: its size and the plot area inside the margins."""
from dataclasses import dataclass


@dataclass
class ChartFrame:
    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
