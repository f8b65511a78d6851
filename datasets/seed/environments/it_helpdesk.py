from datetime import date
from typing import TypedDict


class EmployeeInfo(TypedDict):
    employee_id: str
    name: str
    email: str
    department: str
    title: str
    status: str  # "active" | "terminated"
    account_locked: bool


class TechnicianInfo(TypedDict):
    technician_id: str
    name: str
    team: str  # "hardware" | "software" | "network" | "accounts"
    status: str  # "available" | "on_leave"
    max_open_tickets: int


class TicketInfo(TypedDict):
    ticket_id: str
    requester_id: str
    title: str
    description: str
    category: str  # same values as a technician team
    priority: str  # "low" | "medium" | "high" | "critical"
    status: str  # "open" | "in_progress" | "resolved" | "closed"
    assigned_to: str | None
    created_date: str
    resolved_date: str | None
    resolution: str | None
    comments: list[dict]


class AssetInfo(TypedDict):
    asset_id: str
    asset_type: str  # "laptop" | "monitor" | "phone" | "headset"
    model: str
    serial: str
    status: str  # "in_stock" | "assigned" | "in_repair" | "retired"
    assigned_to: str | None


class LicenseInfo(TypedDict):
    license_id: str
    product: str
    seats_total: int
    assigned_employee_ids: list[str]


CATEGORIES = ("hardware", "software", "network", "accounts")
PRIORITIES = ("low", "medium", "high", "critical")
ACTIVE_TICKET_STATUSES = ("open", "in_progress")
REOPEN_WINDOW_DAYS = 14


class ItHelpdesk:
    def __init__(self, init_config: dict):
        """Create the helpdesk's state containers from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2026-03-10")
        self.employees: dict[str, EmployeeInfo] = init_config.get("employees", {})
        self.technicians: dict[str, TechnicianInfo] = init_config.get("technicians", {})
        self.tickets: dict[str, TicketInfo] = init_config.get("tickets", {})
        self.assets: dict[str, AssetInfo] = init_config.get("assets", {})
        self.licenses: dict[str, LicenseInfo] = init_config.get("licenses", {})
        self.next_ticket_number: int = init_config.get("next_ticket_number", 1000)

    # ------------------------------------------------------------------ helpers

    def _open_ticket_count(self, technician_id: str) -> int:
        return sum(
            1
            for ticket in self.tickets.values()
            if ticket["assigned_to"] == technician_id and ticket["status"] in ACTIVE_TICKET_STATUSES
        )

    def _license_by_product(self, product: str) -> LicenseInfo | None:
        wanted = product.strip().lower()
        for license_info in self.licenses.values():
            if license_info["product"].lower() == wanted:
                return license_info
        return None

    def _add_comment(self, ticket: TicketInfo, author: str, text: str) -> None:
        ticket["comments"].append({"author": author, "text": text, "date": self.current_date})

    # ------------------------------------------------------------------ queries

    def find_employees(self, query: str) -> dict:
        """Search employees whose name or email contains the query (case-insensitive).

        Args:
            query: Part of a name or an email address, e.g. "kim" or "j.kim@acme.example".
        """
        needle = query.strip().lower()
        if not needle:
            return {"success": False, "error": "The search query must not be empty."}
        matches = [
            employee
            for employee in self.employees.values()
            if needle in employee["name"].lower() or needle in employee["email"].lower()
        ]
        return {"success": True, "data": matches}

    def get_employee(self, employee_id: str) -> dict:
        """Get one employee's record.

        Args:
            employee_id: The employee's id, e.g. "E-101".
        """
        employee = self.employees.get(employee_id)
        if employee is None:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        return {"success": True, "data": employee}

    def list_employee_tickets(self, employee_id: str) -> dict:
        """List every ticket raised by an employee, newest first.

        Args:
            employee_id: The requester's employee id.
        """
        if employee_id not in self.employees:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        tickets = [t for t in self.tickets.values() if t["requester_id"] == employee_id]
        tickets.sort(key=lambda t: t["ticket_id"], reverse=True)
        return {"success": True, "data": tickets}

    def get_ticket(self, ticket_id: str) -> dict:
        """Get one ticket with its comments.

        Args:
            ticket_id: The ticket's id, e.g. "T-1001".
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            return {"success": False, "error": f"No ticket with id {ticket_id}."}
        return {"success": True, "data": ticket}

    def list_technicians(self, team: str | None = None) -> dict:
        """List technicians with their team, availability and current number of active tickets.

        Args:
            team: Only technicians of this team: "hardware", "software", "network" or "accounts" (optional).
        """
        if team is not None and team not in CATEGORIES:
            return {"success": False, "error": f"Unknown team {team}. Teams: {', '.join(CATEGORIES)}."}
        rows = []
        for technician in self.technicians.values():
            if team is not None and technician["team"] != team:
                continue
            row = dict(technician)
            row["active_tickets"] = self._open_ticket_count(technician["technician_id"])
            rows.append(row)
        return {"success": True, "data": rows}

    def list_employee_assets(self, employee_id: str) -> dict:
        """List the hardware assets currently assigned to an employee.

        Args:
            employee_id: The employee's id.
        """
        if employee_id not in self.employees:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        assets = [a for a in self.assets.values() if a["assigned_to"] == employee_id]
        return {"success": True, "data": assets}

    def list_assets_in_stock(self, asset_type: str) -> dict:
        """List assets of one type that are in stock and can be handed out.

        Args:
            asset_type: "laptop", "monitor", "phone" or "headset".
        """
        assets = [a for a in self.assets.values() if a["asset_type"] == asset_type and a["status"] == "in_stock"]
        return {"success": True, "data": assets}

    def list_licenses(self, employee_id: str | None = None) -> dict:
        """List software licenses with free seats; optionally only those held by one employee.

        Args:
            employee_id: Only products this employee holds a seat of (optional).
        """
        rows = []
        for license_info in self.licenses.values():
            if employee_id is not None and employee_id not in license_info["assigned_employee_ids"]:
                continue
            row = dict(license_info)
            row["seats_free"] = license_info["seats_total"] - len(license_info["assigned_employee_ids"])
            rows.append(row)
        return {"success": True, "data": rows}

    # ------------------------------------------------------------------ tickets

    def create_ticket(self, requester_id: str, title: str, description: str, category: str, priority: str) -> dict:
        """Open a new ticket for an employee.

        Args:
            requester_id: The employee the ticket is for.
            title: A short summary of the problem.
            description: The details of the problem.
            category: "hardware", "software", "network" or "accounts".
            priority: "low", "medium", "high" or "critical".
        """
        employee = self.employees.get(requester_id)
        if employee is None:
            return {"success": False, "error": f"No employee with id {requester_id}."}
        if employee["status"] != "active":
            return {
                "success": False,
                "error": f"Employee {requester_id} is not active; tickets need an active requester.",
            }
        if category not in CATEGORIES:
            return {
                "success": False,
                "error": f"Unknown category {category}. Categories: {', '.join(CATEGORIES)}.",
            }
        if priority not in PRIORITIES:
            return {
                "success": False,
                "error": f"Unknown priority {priority}. Priorities: {', '.join(PRIORITIES)}.",
            }
        if not title.strip():
            return {"success": False, "error": "A ticket needs a title."}
        ticket_id = f"T-{self.next_ticket_number}"
        self.next_ticket_number += 1
        self.tickets[ticket_id] = {
            "ticket_id": ticket_id,
            "requester_id": requester_id,
            "title": title,
            "description": description,
            "category": category,
            "priority": priority,
            "status": "open",
            "assigned_to": None,
            "created_date": self.current_date,
            "resolved_date": None,
            "resolution": None,
            "comments": [],
        }
        return {"success": True, "data": {"ticket_id": ticket_id}}

    def assign_ticket(self, ticket_id: str, technician_id: str) -> dict:
        """Assign or reassign a ticket to a technician of the matching team.

        Args:
            ticket_id: The ticket to assign.
            technician_id: The technician who takes it, e.g. "TECH-3".
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            return {"success": False, "error": f"No ticket with id {ticket_id}."}
        if ticket["status"] not in ACTIVE_TICKET_STATUSES:
            return {
                "success": False,
                "error": f"Ticket {ticket_id} is {ticket['status']}; only open or in-progress tickets can be assigned.",
            }
        technician = self.technicians.get(technician_id)
        if technician is None:
            return {"success": False, "error": f"No technician with id {technician_id}."}
        if technician["status"] != "available":
            return {"success": False, "error": f"Technician {technician_id} is {technician['status']}."}
        if technician["team"] != ticket["category"]:
            return {
                "success": False,
                "error": f"Technician {technician_id} is on the {technician['team']} team; ticket "
                f"{ticket_id} needs the {ticket['category']} team.",
            }
        if ticket["assigned_to"] == technician_id:
            return {"success": False, "error": f"Ticket {ticket_id} is already assigned to {technician_id}."}
        if self._open_ticket_count(technician_id) >= technician["max_open_tickets"]:
            return {
                "success": False,
                "error": f"Technician {technician_id} already has {technician['max_open_tickets']} active "
                "tickets, the maximum.",
            }
        ticket["assigned_to"] = technician_id
        ticket["status"] = "in_progress"
        return {"success": True, "message": f"Ticket {ticket_id} assigned to {technician_id}."}

    def set_ticket_priority(self, ticket_id: str, priority: str) -> dict:
        """Change the priority of an open or in-progress ticket.

        Args:
            ticket_id: The ticket to change.
            priority: "low", "medium", "high" or "critical".
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            return {"success": False, "error": f"No ticket with id {ticket_id}."}
        if ticket["status"] not in ACTIVE_TICKET_STATUSES:
            return {
                "success": False,
                "error": f"Ticket {ticket_id} is {ticket['status']}; its priority can no longer change.",
            }
        if priority not in PRIORITIES:
            return {
                "success": False,
                "error": f"Unknown priority {priority}. Priorities: {', '.join(PRIORITIES)}.",
            }
        ticket["priority"] = priority
        return {"success": True, "message": f"Ticket {ticket_id} priority set to {priority}."}

    def add_ticket_comment(self, ticket_id: str, author: str, text: str) -> dict:
        """Add a comment to a ticket that is not closed.

        Args:
            ticket_id: The ticket to comment on.
            author: Who writes the comment, e.g. "helpdesk".
            text: The comment.
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            return {"success": False, "error": f"No ticket with id {ticket_id}."}
        if ticket["status"] == "closed":
            return {
                "success": False,
                "error": f"Ticket {ticket_id} is closed; closed tickets cannot be changed.",
            }
        if not text.strip():
            return {"success": False, "error": "A comment needs some text."}
        self._add_comment(ticket, author, text)
        return {"success": True, "message": f"Comment added to {ticket_id}."}

    def resolve_ticket(self, ticket_id: str, resolution: str) -> dict:
        """Mark an assigned ticket as resolved with a resolution note.

        Args:
            ticket_id: The ticket to resolve.
            resolution: What fixed the problem.
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            return {"success": False, "error": f"No ticket with id {ticket_id}."}
        if ticket["status"] not in ACTIVE_TICKET_STATUSES:
            return {
                "success": False,
                "error": f"Ticket {ticket_id} is {ticket['status']}; only open or in-progress tickets can be resolved.",
            }
        if ticket["assigned_to"] is None:
            return {
                "success": False,
                "error": f"Ticket {ticket_id} is unassigned; assign it before resolving.",
            }
        if not resolution.strip():
            return {"success": False, "error": "A resolution note is required."}
        ticket["status"] = "resolved"
        ticket["resolution"] = resolution
        ticket["resolved_date"] = self.current_date
        return {"success": True, "message": f"Ticket {ticket_id} resolved."}

    def close_ticket(self, ticket_id: str) -> dict:
        """Close a resolved ticket. Closing is final.

        Args:
            ticket_id: The ticket to close.
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            return {"success": False, "error": f"No ticket with id {ticket_id}."}
        if ticket["status"] != "resolved":
            return {
                "success": False,
                "error": f"Ticket {ticket_id} is {ticket['status']}; only resolved tickets can be closed.",
            }
        ticket["status"] = "closed"
        return {"success": True, "message": f"Ticket {ticket_id} closed."}

    def reopen_ticket(self, ticket_id: str, reason: str) -> dict:
        """Reopen a resolved ticket within 14 days of its resolution; it goes back to its technician.

        Args:
            ticket_id: The ticket to reopen.
            reason: Why the problem is not fixed.
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            return {"success": False, "error": f"No ticket with id {ticket_id}."}
        if ticket["status"] != "resolved":
            return {
                "success": False,
                "error": f"Ticket {ticket_id} is {ticket['status']}; only resolved tickets can be reopened.",
            }
        resolved_on = date.fromisoformat(ticket["resolved_date"] or self.current_date)
        elapsed = (date.fromisoformat(self.current_date) - resolved_on).days
        if elapsed > REOPEN_WINDOW_DAYS:
            return {
                "success": False,
                "error": f"Ticket {ticket_id} was resolved {elapsed} days ago; tickets can be reopened "
                f"only within {REOPEN_WINDOW_DAYS} days. Open a new ticket instead.",
            }
        if not reason.strip():
            return {"success": False, "error": "A reason is required to reopen a ticket."}
        ticket["status"] = "in_progress" if ticket["assigned_to"] else "open"
        ticket["resolution"] = None
        ticket["resolved_date"] = None
        self._add_comment(ticket, "helpdesk", f"Reopened: {reason}")
        return {"success": True, "message": f"Ticket {ticket_id} reopened."}

    # ------------------------------------------------------------------ assets, licenses, accounts

    def assign_asset(self, asset_id: str, employee_id: str) -> dict:
        """Hand an in-stock asset to an active employee (at most one laptop per employee).

        Args:
            asset_id: The asset to hand out, e.g. "A-501".
            employee_id: The employee who receives it.
        """
        asset = self.assets.get(asset_id)
        if asset is None:
            return {"success": False, "error": f"No asset with id {asset_id}."}
        employee = self.employees.get(employee_id)
        if employee is None:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        if employee["status"] != "active":
            return {"success": False, "error": f"Employee {employee_id} is not active."}
        if asset["status"] != "in_stock":
            return {
                "success": False,
                "error": f"Asset {asset_id} is {asset['status']}; only in-stock assets can be assigned.",
            }
        if asset["asset_type"] == "laptop":
            held = [
                a["asset_id"]
                for a in self.assets.values()
                if a["assigned_to"] == employee_id and a["asset_type"] == "laptop"
            ]
            if held:
                return {
                    "success": False,
                    "error": f"Employee {employee_id} already holds laptop {held[0]}; return it first.",
                }
        asset["status"] = "assigned"
        asset["assigned_to"] = employee_id
        return {"success": True, "message": f"Asset {asset_id} assigned to {employee_id}."}

    def return_asset(self, asset_id: str, damaged: bool = False) -> dict:
        """Take back an assigned asset; a damaged asset goes to repair, otherwise back to stock.

        Args:
            asset_id: The asset being returned.
            damaged: True if the asset comes back damaged.
        """
        asset = self.assets.get(asset_id)
        if asset is None:
            return {"success": False, "error": f"No asset with id {asset_id}."}
        if asset["status"] != "assigned":
            return {
                "success": False,
                "error": f"Asset {asset_id} is {asset['status']}, not assigned to anyone.",
            }
        asset["status"] = "in_repair" if damaged else "in_stock"
        asset["assigned_to"] = None
        return {"success": True, "message": f"Asset {asset_id} returned ({asset['status']})."}

    def assign_license(self, product: str, employee_id: str) -> dict:
        """Give an active employee a seat of a software product, if a seat is free.

        Args:
            product: The product name, e.g. "Figma".
            employee_id: The employee who gets the seat.
        """
        license_info = self._license_by_product(product)
        if license_info is None:
            return {"success": False, "error": f"No license for product {product}."}
        employee = self.employees.get(employee_id)
        if employee is None:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        if employee["status"] != "active":
            return {"success": False, "error": f"Employee {employee_id} is not active."}
        if employee_id in license_info["assigned_employee_ids"]:
            return {
                "success": False,
                "error": f"Employee {employee_id} already has a {license_info['product']} seat.",
            }
        if len(license_info["assigned_employee_ids"]) >= license_info["seats_total"]:
            return {
                "success": False,
                "error": f"All {license_info['seats_total']} {license_info['product']} seats are taken.",
            }
        license_info["assigned_employee_ids"].append(employee_id)
        return {"success": True, "message": f"{license_info['product']} seat given to {employee_id}."}

    def revoke_license(self, product: str, employee_id: str) -> dict:
        """Take a software seat back from an employee.

        Args:
            product: The product name.
            employee_id: The employee who holds the seat.
        """
        license_info = self._license_by_product(product)
        if license_info is None:
            return {"success": False, "error": f"No license for product {product}."}
        if employee_id not in license_info["assigned_employee_ids"]:
            return {
                "success": False,
                "error": f"Employee {employee_id} holds no {license_info['product']} seat.",
            }
        license_info["assigned_employee_ids"].remove(employee_id)
        return {"success": True, "message": f"{license_info['product']} seat revoked from {employee_id}."}

    def unlock_account(self, employee_id: str) -> dict:
        """Unlock the locked account of an active employee.

        Args:
            employee_id: The employee whose account is locked.
        """
        employee = self.employees.get(employee_id)
        if employee is None:
            return {"success": False, "error": f"No employee with id {employee_id}."}
        if employee["status"] != "active":
            return {
                "success": False,
                "error": f"Employee {employee_id} is {employee['status']}; only active accounts can be unlocked.",
            }
        if not employee["account_locked"]:
            return {"success": False, "error": f"The account of {employee_id} is not locked."}
        employee["account_locked"] = False
        return {"success": True, "message": f"Account of {employee_id} unlocked."}
