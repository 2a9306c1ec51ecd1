"""What one caller of the webhook server may have in flight at once (docs/security.md): a number of
reviews and their bytes. The API server is a caller like any other, so a pod that floods the port
with large reviews spends its own budget, not the API server's, and cannot hold more than its
budget in memory. Pure: the server (:mod:`.webhooks`) takes and gives back around each review."""

from dataclasses import dataclass, field

MAX_REVIEW_BYTES = 16 * 1024 * 1024  # an update's review holds the object twice
# Reviews in flight grow with the time an answer takes (the audit webhook's may wait 2.5 s for its
# write): 1024 small reviews are a few MiB, so the count is generous and the bytes are the bound;
# one caller's largest reviews are held one at a time.
REVIEWS_PER_CALLER = 1024
BYTES_PER_CALLER = MAX_REVIEW_BYTES


@dataclass
class CallerBudget:
    reviews: int = REVIEWS_PER_CALLER
    size: int = BYTES_PER_CALLER
    held: dict[str, tuple[int, int]] = field(default_factory=dict)  # caller -> (reviews, bytes) in flight

    def take(self, caller: str, size: int) -> bool:
        """Whether ``caller`` may have one more review of ``size`` bytes in flight (then it has)."""
        reviews, held = self.held.get(caller, (0, 0))
        if reviews >= self.reviews or (reviews and held + size > self.size):
            return False  # the first review of a caller always fits: the server caps its size
        self.held[caller] = (reviews + 1, held + size)
        return True

    def give_back(self, caller: str, size: int) -> None:
        """``caller``'s review of ``size`` bytes has been answered."""
        reviews, held = self.held.get(caller, (1, size))
        if reviews <= 1:
            self.held.pop(caller, None)
        else:
            self.held[caller] = (reviews - 1, held - size)
