"""Public library circulation: members, catalog titles, physical copies, loans, holds and fines."""

from datetime import date, timedelta
from typing import TypedDict


class MemberInfo(TypedDict):
    member_id: str
    name: str
    email: str
    membership: str  # "standard" | "premium"
    status: str  # "active" | "suspended"


class CopyInfo(TypedDict):
    copy_id: str
    title_id: str
    branch: str
    status: str  # "available" | "on_loan" | "on_hold_shelf" | "lost" | "in_repair"


class LoanInfo(TypedDict):
    loan_id: str
    copy_id: str
    member_id: str
    checkout_date: str
    due_date: str
    returned_date: str
    renewals: int


LOAN_DAYS = 21
RENEWAL_DAYS = 14
MAX_RENEWALS = 2
LOAN_LIMITS = {"standard": 5, "premium": 10}
LATE_FEE_PER_DAY = 0.25
LATE_FEE_CAP = 10.0
FINE_BLOCK_THRESHOLD = 10.0


class LibraryCirculation:
    def __init__(self, init_config: dict):
        """Create the state containers from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2025-01-01")
        self.members: dict[str, MemberInfo] = init_config.get("members", {})
        self.titles: dict[str, dict] = init_config.get("titles", {})
        self.copies: dict[str, CopyInfo] = init_config.get("copies", {})
        self.loans: dict[str, LoanInfo] = init_config.get("loans", {})
        self.holds: dict[str, dict] = init_config.get("holds", {})
        self.fines: dict[str, dict] = init_config.get("fines", {})

    # ------------------------------------------------------------------ helpers

    def _next_id(self, prefix: str, existing: dict) -> str:
        number = len(existing) + 1
        while f"{prefix}-{number}" in existing:
            number += 1
        return f"{prefix}-{number}"

    def _today(self) -> date:
        return date.fromisoformat(self.current_date)

    def _open_loans(self, member_id: str) -> list:
        return [x for x in self.loans.values() if x["member_id"] == member_id and not x["returned_date"]]

    def _unpaid_fines(self, member_id: str) -> float:
        total = sum(
            f["amount"] - f["paid"]
            for f in self.fines.values()
            if f["member_id"] == member_id and f["status"] == "unpaid"
        )
        return round(total, 2)

    def _borrowing_block(self, member_id: str) -> str:
        """Why the member may not borrow or renew right now, or an empty string."""
        member = self.members[member_id]
        if member["status"] != "active":
            return f"Member {member_id} is {member['status']}."
        overdue = [x["loan_id"] for x in self._open_loans(member_id) if x["due_date"] < self.current_date]
        if overdue:
            return f"Member {member_id} has overdue loans ({', '.join(sorted(overdue))}); return them first."
        owed = self._unpaid_fines(member_id)
        if owed > FINE_BLOCK_THRESHOLD:
            return f"Member {member_id} owes {owed:.2f} in fines (limit {FINE_BLOCK_THRESHOLD:.2f})."
        return ""

    def _waiting_holds(self, title_id: str) -> list:
        waiting = [h for h in self.holds.values() if h["title_id"] == title_id and h["status"] == "waiting"]
        return sorted(waiting, key=lambda h: (h["placed_date"], h["hold_id"]))

    # ------------------------------------------------------------------ queries

    def find_member_by_email(self, email: str) -> dict:
        """Find a library member by email address (case-insensitive).

        Args:
            email: The member's email address.
        """
        wanted = email.strip().lower()
        for member in self.members.values():
            if member["email"].lower() == wanted:
                return {"success": True, "data": member}
        return {"success": False, "error": f"No member with email {email}."}

    def find_members_by_name(self, name: str) -> dict:
        """List members whose name contains the given text (case-insensitive).

        Args:
            name: Full or partial name.
        """
        wanted = name.strip().lower()
        matches = [m for m in self.members.values() if wanted in m["name"].lower()]
        if not matches:
            return {"success": False, "error": f"No member named like {name}."}
        return {"success": True, "data": matches}

    def get_member(self, member_id: str) -> dict:
        """Get a member's profile with counts of open loans and unpaid fines.

        Args:
            member_id: The member's id, e.g. "M-001".
        """
        member = self.members.get(member_id)
        if member is None:
            return {"success": False, "error": f"No member with id {member_id}."}
        data = dict(member)
        data["open_loans"] = len(self._open_loans(member_id))
        data["unpaid_fines"] = self._unpaid_fines(member_id)
        return {"success": True, "data": data}

    def search_catalog(self, query: str) -> dict:
        """Search titles by title or author text (case-insensitive), with how many copies are available.

        Args:
            query: Text to look for in titles and authors.
        """
        wanted = query.strip().lower()
        found = []
        for title in self.titles.values():
            if wanted in title["title"].lower() or wanted in title["author"].lower():
                available = sum(
                    1 for c in self.copies.values() if c["title_id"] == title["title_id"] and c["status"] == "available"
                )
                found.append(dict(title, available_copies=available))
        return {"success": True, "data": found}

    def get_title_copies(self, title_id: str) -> dict:
        """List the physical copies of a title with their branch and status.

        Args:
            title_id: The title's id, e.g. "T-10".
        """
        if title_id not in self.titles:
            return {"success": False, "error": f"No title with id {title_id}."}
        return {"success": True, "data": [c for c in self.copies.values() if c["title_id"] == title_id]}

    def list_member_loans(self, member_id: str, include_returned: bool = False) -> dict:
        """List a member's loans (open ones by default), with title and due date.

        Args:
            member_id: The member's id.
            include_returned: Also list loans already returned.
        """
        if member_id not in self.members:
            return {"success": False, "error": f"No member with id {member_id}."}
        found = []
        for loan in self.loans.values():
            if loan["member_id"] != member_id or (loan["returned_date"] and not include_returned):
                continue
            copy = self.copies.get(loan["copy_id"], {})
            title = self.titles.get(copy.get("title_id", ""), {})
            found.append(dict(loan, title=title.get("title", ""), title_id=copy.get("title_id", "")))
        return {"success": True, "data": found}

    def list_member_holds(self, member_id: str) -> dict:
        """List a member's holds.

        Args:
            member_id: The member's id.
        """
        if member_id not in self.members:
            return {"success": False, "error": f"No member with id {member_id}."}
        return {"success": True, "data": [h for h in self.holds.values() if h["member_id"] == member_id]}

    def list_member_fines(self, member_id: str) -> dict:
        """List a member's fines with amounts, amounts paid and status.

        Args:
            member_id: The member's id.
        """
        if member_id not in self.members:
            return {"success": False, "error": f"No member with id {member_id}."}
        return {"success": True, "data": [f for f in self.fines.values() if f["member_id"] == member_id]}

    # ------------------------------------------------------------------ state changes

    def checkout_copy(self, member_id: str, copy_id: str) -> dict:
        """Lend a physical copy to a member for 21 days.

        Refused when the member is suspended, has an overdue loan, owes more than 10.00 in fines, or is at the
        loan limit (standard 5, premium 10), and for copies held for another member.

        Args:
            member_id: The borrowing member.
            copy_id: The copy to lend, e.g. "C-10-1".
        """
        member = self.members.get(member_id)
        if member is None:
            return {"success": False, "error": f"No member with id {member_id}."}
        copy = self.copies.get(copy_id)
        if copy is None:
            return {"success": False, "error": f"No copy with id {copy_id}."}
        block = self._borrowing_block(member_id)
        if block:
            return {"success": False, "error": block}
        limit = LOAN_LIMITS.get(member["membership"], 5)
        if len(self._open_loans(member_id)) >= limit:
            return {"success": False, "error": f"Member {member_id} already has {limit} loans (the limit)."}
        ready_hold = None
        if copy["status"] == "on_hold_shelf":
            ready_hold = next(
                (h for h in self.holds.values() if h["status"] == "ready" and h["copy_id"] == copy_id), None
            )
            if ready_hold is None or ready_hold["member_id"] != member_id:
                return {"success": False, "error": f"Copy {copy_id} is held for another member."}
        elif copy["status"] != "available":
            return {"success": False, "error": f"Copy {copy_id} is {copy['status']}."}
        loan_id = self._next_id("L", self.loans)
        due = self._today() + timedelta(days=LOAN_DAYS)
        self.loans[loan_id] = {
            "loan_id": loan_id,
            "copy_id": copy_id,
            "member_id": member_id,
            "checkout_date": self.current_date,
            "due_date": due.isoformat(),
            "returned_date": "",
            "renewals": 0,
        }
        copy["status"] = "on_loan"
        if ready_hold is not None:
            ready_hold["status"] = "fulfilled"
        return {
            "success": True,
            "message": f"Loan {loan_id} created; due {due.isoformat()}.",
            "data": loan_id,
        }

    def return_copy(self, copy_id: str) -> dict:
        """Check a copy back in. A late return creates a fine of 0.25 per day late (at most 10.00).

        If another member is waiting for the title, the copy goes to the hold shelf for them.

        Args:
            copy_id: The copy being returned.
        """
        copy = self.copies.get(copy_id)
        if copy is None:
            return {"success": False, "error": f"No copy with id {copy_id}."}
        loan = next((x for x in self.loans.values() if x["copy_id"] == copy_id and not x["returned_date"]), None)
        if loan is None:
            return {"success": False, "error": f"Copy {copy_id} is not on loan."}
        loan["returned_date"] = self.current_date
        days_late = (self._today() - date.fromisoformat(loan["due_date"])).days
        message = f"Copy {copy_id} returned."
        if days_late > 0:
            amount = round(min(LATE_FEE_CAP, days_late * LATE_FEE_PER_DAY), 2)
            fine_id = self._next_id("F", self.fines)
            self.fines[fine_id] = {
                "fine_id": fine_id,
                "member_id": loan["member_id"],
                "loan_id": loan["loan_id"],
                "kind": "late",
                "amount": amount,
                "paid": 0.0,
                "status": "unpaid",
                "date": self.current_date,
            }
            message += f" {days_late} day(s) late: fine {fine_id} of {amount:.2f}."
        waiting = self._waiting_holds(copy["title_id"])
        if waiting:
            waiting[0]["status"] = "ready"
            waiting[0]["copy_id"] = copy_id
            copy["status"] = "on_hold_shelf"
            message += f" Held for {waiting[0]['member_id']} ({waiting[0]['hold_id']})."
        else:
            copy["status"] = "available"
        return {"success": True, "message": message}

    def renew_loan(self, loan_id: str) -> dict:
        """Extend a loan's due date by 14 days.

        At most 2 renewals; not when another member is waiting for the title, nor when the member may
        not borrow (overdue items, fines over 10.00, suspended).

        Args:
            loan_id: The loan to renew.
        """
        loan = self.loans.get(loan_id)
        if loan is None:
            return {"success": False, "error": f"No loan with id {loan_id}."}
        if loan["returned_date"]:
            return {"success": False, "error": f"Loan {loan_id} was already returned."}
        if loan["renewals"] >= MAX_RENEWALS:
            return {"success": False, "error": f"Loan {loan_id} was already renewed {MAX_RENEWALS} times."}
        block = self._borrowing_block(loan["member_id"])
        if block:
            return {"success": False, "error": block}
        title_id = self.copies[loan["copy_id"]]["title_id"]
        if any(h["member_id"] != loan["member_id"] for h in self._waiting_holds(title_id)):
            return {
                "success": False,
                "error": "Another member is waiting for this title; it cannot be renewed.",
            }
        new_due = date.fromisoformat(loan["due_date"]) + timedelta(days=RENEWAL_DAYS)
        loan["due_date"] = new_due.isoformat()
        loan["renewals"] += 1
        return {"success": True, "message": f"Loan {loan_id} renewed; due {new_due.isoformat()}."}

    def place_hold(self, member_id: str, title_id: str) -> dict:
        """Join the waiting list for a title that has no copy available.

        Args:
            member_id: The member.
            title_id: The title to wait for.
        """
        member = self.members.get(member_id)
        if member is None:
            return {"success": False, "error": f"No member with id {member_id}."}
        if title_id not in self.titles:
            return {"success": False, "error": f"No title with id {title_id}."}
        if member["status"] != "active":
            return {"success": False, "error": f"Member {member_id} is {member['status']}."}
        if any(c["title_id"] == title_id and c["status"] == "available" for c in self.copies.values()):
            return {
                "success": False,
                "error": "A copy is available on the shelf; check it out instead of holding.",
            }
        for hold in self.holds.values():
            if (
                hold["member_id"] == member_id
                and hold["title_id"] == title_id
                and hold["status"]
                in (
                    "waiting",
                    "ready",
                )
            ):
                return {
                    "success": False,
                    "error": f"Member already has hold {hold['hold_id']} on this title.",
                }
        for loan in self._open_loans(member_id):
            if self.copies[loan["copy_id"]]["title_id"] == title_id:
                return {"success": False, "error": "The member already has this title on loan."}
        hold_id = self._next_id("H", self.holds)
        self.holds[hold_id] = {
            "hold_id": hold_id,
            "member_id": member_id,
            "title_id": title_id,
            "placed_date": self.current_date,
            "status": "waiting",
            "copy_id": "",
        }
        return {"success": True, "message": f"Hold {hold_id} placed.", "data": hold_id}

    def cancel_hold(self, hold_id: str) -> dict:
        """Cancel a waiting or ready hold. A copy on the hold shelf passes to the next member waiting.

        Args:
            hold_id: The hold to cancel.
        """
        hold = self.holds.get(hold_id)
        if hold is None:
            return {"success": False, "error": f"No hold with id {hold_id}."}
        if hold["status"] not in ("waiting", "ready"):
            return {"success": False, "error": f"Hold {hold_id} is {hold['status']}."}
        copy_id = hold["copy_id"] if hold["status"] == "ready" else ""
        hold["status"] = "cancelled"
        if copy_id:
            hold["copy_id"] = ""
            waiting = self._waiting_holds(hold["title_id"])
            if waiting:
                waiting[0]["status"] = "ready"
                waiting[0]["copy_id"] = copy_id
            else:
                self.copies[copy_id]["status"] = "available"
        return {"success": True, "message": f"Hold {hold_id} cancelled."}

    def pay_fine(self, fine_id: str, amount: float) -> dict:
        """Record a payment towards a fine; overpayment is refused.

        Args:
            fine_id: The fine.
            amount: Amount paid, greater than zero and at most what is still owed.
        """
        fine = self.fines.get(fine_id)
        if fine is None:
            return {"success": False, "error": f"No fine with id {fine_id}."}
        if fine["status"] != "unpaid":
            return {"success": False, "error": f"Fine {fine_id} is {fine['status']}."}
        owed = round(fine["amount"] - fine["paid"], 2)
        if amount <= 0 or amount > owed:
            return {"success": False, "error": f"Amount must be between 0 and {owed:.2f}."}
        fine["paid"] = round(fine["paid"] + amount, 2)
        if fine["paid"] >= fine["amount"]:
            fine["status"] = "paid"
        return {"success": True, "message": f"Paid {amount:.2f} towards {fine_id}."}

    def waive_fine(self, fine_id: str, reason: str) -> dict:
        """Waive what is left of a late-return fine. Lost-item fines can never be waived.

        Args:
            fine_id: The fine.
            reason: Why it is waived.
        """
        fine = self.fines.get(fine_id)
        if fine is None:
            return {"success": False, "error": f"No fine with id {fine_id}."}
        if fine["status"] != "unpaid":
            return {"success": False, "error": f"Fine {fine_id} is {fine['status']}."}
        if fine["kind"] != "late":
            return {
                "success": False,
                "error": f"Fine {fine_id} is a {fine['kind']} fine; only late fines can be waived.",
            }
        if not reason.strip():
            return {"success": False, "error": "A reason is required."}
        fine["status"] = "waived"
        fine["waive_reason"] = reason.strip()
        return {"success": True, "message": f"Fine {fine_id} waived."}

    def report_lost(self, loan_id: str) -> dict:
        """Report a borrowed copy as lost: the loan is closed and the title's replacement cost is fined.

        Args:
            loan_id: The open loan of the lost copy.
        """
        loan = self.loans.get(loan_id)
        if loan is None:
            return {"success": False, "error": f"No loan with id {loan_id}."}
        if loan["returned_date"]:
            return {"success": False, "error": f"Loan {loan_id} was already returned."}
        copy = self.copies[loan["copy_id"]]
        cost = self.titles[copy["title_id"]]["replacement_cost"]
        loan["returned_date"] = self.current_date
        loan["lost"] = True
        copy["status"] = "lost"
        fine_id = self._next_id("F", self.fines)
        self.fines[fine_id] = {
            "fine_id": fine_id,
            "member_id": loan["member_id"],
            "loan_id": loan_id,
            "kind": "lost_item",
            "amount": cost,
            "paid": 0.0,
            "status": "unpaid",
            "date": self.current_date,
        }
        return {
            "success": True,
            "message": f"Copy {copy['copy_id']} marked lost; fine {fine_id} of {cost:.2f}.",
        }

    def update_member_email(self, member_id: str, email: str) -> dict:
        """Change a member's email address; it must not belong to another member.

        Args:
            member_id: The member.
            email: The new email address.
        """
        member = self.members.get(member_id)
        if member is None:
            return {"success": False, "error": f"No member with id {member_id}."}
        wanted = email.strip().lower()
        if "@" not in wanted:
            return {"success": False, "error": "That is not an email address."}
        for other in self.members.values():
            if other["member_id"] != member_id and other["email"].lower() == wanted:
                return {"success": False, "error": "That email belongs to another member."}
        member["email"] = email.strip()
        return {"success": True, "message": f"Email of {member_id} updated."}
