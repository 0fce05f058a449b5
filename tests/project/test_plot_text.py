"""Text from a file drawn in a figure (``escape.plot_text``, the one place the kit escapes
matplotlib's math-text ``$``): whatever the text, matplotlib takes it for plain text and
shows it as it was. The figures' footnote, the survey's host axis and the doctor's trace
name all go through it."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from matplotlib import cbook  # noqa: E402

from h2dlab.escape import plot_text  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("$\\ab{}^_ "), max_size=16) | st.text(max_size=16))
def test_any_text_is_drawn_as_plain_text_and_shows_as_it_was(text):
    drawn = plot_text(text)
    assert not cbook.is_math_text(drawn)
    assert drawn.replace(r"\$", "$") == text  # what matplotlib shows for plain text


def test_a_name_that_would_be_broken_math_draws_as_text():
    name = "GPU $H200 x^{2 $"
    fig, ax = plt.subplots()
    raw = ax.text(0, 0, name)
    with pytest.raises(ValueError):  # raw, two "$" open math text and "{2 " breaks it
        fig.canvas.draw()
    raw.remove()
    t = ax.text(0, 0, plot_text(name))
    fig.canvas.draw()
    assert t.get_text() == r"GPU \$H200 x^{2 \$"
    plt.close(fig)


def test_numbers_and_names_come_back_as_text():
    assert plot_text(3.5) == "3.5" and plot_text("node-7") == "node-7" and plot_text("$$") == r"\$\$"
