"""The page says why an answer was interrupted, for every reason the gateway writes: a bare
"interrupted" leaves a user guessing whether to ask again."""

from __future__ import annotations

from playwright.async_api import Page

from app.answer import interruptions
from tests.web.page_helpers import BROWSER_TESTS

pytestmark = BROWSER_TESTS

REASONS = sorted(value for name, value in vars(interruptions).items()
                 if name.isupper() and isinstance(value, str))


async def test_every_interruption_reason_has_words(page: Page, gateway_url: str) -> None:
    await page.goto(gateway_url)
    said: dict[str, str] = await page.evaluate(
        """async (reasons) => {
            const words = await import("/static/words.js");
            return Object.fromEntries(reasons.map((reason) => [reason, words.statusWords(
                {status: "interrupted", metadata: {interrupted_reason: reason}}).text]));
        }""",
        REASONS,
    )
    assert len(REASONS) >= 8
    assert said.pop("stop_request") == "stopped"
    assert all(text.startswith("interrupted: ") and len(text) > 20 for text in said.values()), said
